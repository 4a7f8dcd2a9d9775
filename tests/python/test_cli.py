"""A Python program and the kvq command sharing one queue, both ways."""

import os
import subprocess

import pytest

import kvq


def kvq_cmd(cli, url, *args, input=None):
    # A Sanitize build preloads the ASan runtime into python; the kvq program has its own.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    p = subprocess.run([cli, "--db", url, *args], input=input, capture_output=True, text=True,
                       env=env)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("type", ["durable", "fifo", "priority"])
def test_push_and_pop_both_ways(db, url, cli, type):
    rc, _, err = kvq_cmd(cli, url, "create", "jobs", "--type", type)
    assert rc == 0, err
    q = db.queue("jobs")
    assert q.type == type
    q.push("from python")
    q.push_many(["p2", "p3"])
    rc, out, err = kvq_cmd(cli, url, "pop", "jobs", "-n", "3")
    assert (rc, out) == (0, "from python\np2\np3\n"), err
    rc, _, err = kvq_cmd(cli, url, "push", "jobs", "from the command", "c2")
    assert rc == 0, err
    assert len(q) == 2
    assert q.pop(5) == [b"from the command", b"c2"]
    rc, out, _ = kvq_cmd(cli, url, "pop", "jobs")
    assert rc == 1  # empty for both


def test_python_creates_the_command_uses(db, url, cli):
    db.create_queue("made-in-python", "priority", lease=2, max_deliveries=4)
    db.queue("made-in-python").push("urgent", 1)
    rc, out, err = kvq_cmd(cli, url, "pop", "made-in-python", "--max")
    assert (rc, out) == (0, "urgent\n"), err
    rc, out, _ = kvq_cmd(cli, url, "queues")
    assert rc == 0 and "made-in-python" in out


def test_leases_both_ways(db, url, cli):
    db.create_queue("work")
    wq = db.work_queue("work")
    # the command receives, Python acks with its token
    wq.push("job 1")
    rc, out, err = kvq_cmd(cli, url, "receive", "work")
    assert rc == 0, err
    token, value = out.rstrip("\n").split("\t")
    assert value == "job 1"
    assert [i.token for i in wq.in_flight()] == [token]
    wq.ack(token)
    assert wq.stats().inflight == 0
    # Python receives, the command acks
    rc, _, err = kvq_cmd(cli, url, "push", "work", "job 2")
    assert rc == 0, err
    m = wq.receive(timeout=0)
    assert m.value == b"job 2"
    rc, _, err = kvq_cmd(cli, url, "ack", "work", m.token)
    assert rc == 0, err
    with pytest.raises(kvq.LeaseSettledError):
        m.ack()
    # a delayed, deduplicated push from the command, seen by Python
    rc, _, err = kvq_cmd(cli, url, "push", "work", "--dedup", "d1", "--delay", "3600000", "later")
    assert rc == 0, err
    assert wq.push("again", dedup="d1") is False
    assert [i.value for i in wq.delayed()] == [b"later"]
