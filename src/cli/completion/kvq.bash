# bash completion for kvq: commands, each command's options (from `kvq COMMAND --help`, so they
# never drift from the binary) and queue names (from `kvq queues`, on the --db given so far).
# Installed as share/bash-completion/completions/kvq.

_kvq()
{
    local cur prev kvq db="" cmd="" i
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    kvq="${COMP_WORDS[0]}"
    # The --db given so far, and the command (the first word that is not a global option).
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
        --db) db="${COMP_WORDS[i+1]}"; ((i++)) ;;
        --db=*) db="${COMP_WORDS[i]#--db=}" ;;
        -*) ;;
        *) cmd="${COMP_WORDS[i]}"; break ;;
        esac
    done
    local dbargs=()
    [[ -n "$db" ]] && dbargs=(--db "$db")

    if [[ "$prev" == --db ]]; then
        COMPREPLY=($(compgen -d -- "$cur"))
        return
    fi
    if [[ -z "$cmd" ]]; then
        if [[ "$cur" == -* ]]; then
            COMPREPLY=($(compgen -W "--db --json -0 --null --read-only --help --version" -- "$cur"))
        else
            local cmds
            cmds=$("$kvq" --help 2>/dev/null | sed -n '/^commands:/,/^$/p' | awk 'NR > 1 && NF {print $1}')
            COMPREPLY=($(compgen -W "$cmds" -- "$cur"))
        fi
        return
    fi
    case "$prev" in
    --type) COMPREPLY=($(compgen -W "fifo priority durable" -- "$cur")); return ;;
    --file) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --exec) COMPREPLY=($(compgen -c -- "$cur")); return ;;
    esac
    if [[ "$cur" == -* ]]; then
        local opts
        opts=$("$kvq" "$cmd" --help 2>/dev/null | grep -o -- '--[a-z][a-z-]*' | sort -u)
        COMPREPLY=($(compgen -W "$opts --json --help" -- "$cur"))
        return
    fi
    # The queue NAME: the first word after the command (after list|redrive|purge for dlq).
    local names
    if [[ "$cmd" == dlq && "$prev" == dlq ]]; then
        COMPREPLY=($(compgen -W "list redrive purge" -- "$cur"))
        return
    fi
    if [[ "$cmd" == create || "$cmd" == bench || "$cmd" == demo || "$cmd" == queues ]]; then
        return
    fi
    if [[ "$prev" == "$cmd" || ( "$cmd" == dlq && "${COMP_WORDS[COMP_CWORD-2]}" == dlq ) || "$cmd" == stats ]]; then
        names=$("$kvq" "${dbargs[@]}" queues 2>/dev/null | awk 'NR > 1 {print $1}')
        COMPREPLY=($(compgen -W "$names" -- "$cur"))
    fi
}
complete -F _kvq kvq
