/* A program linked the way FoundationDB's users link theirs: `-lfdb_c` from the directory the
 * docs give for kvq's libfdb_c.so (build/fdbc, <libdir>/kvq), run with that directory alone on
 * its library path. It must have recorded the name libfdb_c.so (the library's SONAME), not
 * kvq's own file name, so that the same program runs on FoundationDB's libfdb_c as well: the
 * loaded objects must include one named libfdb_c.so and none named libkvq_fdb_c.so. */
#include <link.h>
#include <stdio.h>
#include <string.h>

/* Two of FoundationDB's C API functions (fdb_c.h), declared here as any program may. */
const char *fdb_get_error(int code);
int fdb_get_max_api_version(void);

static int as_fdb_c, as_kvq;

static int has_name(const char *path, const char *name)
{
    const char *slash = strrchr(path, '/');
    return strcmp(slash != NULL ? slash + 1 : path, name) == 0;
}

static int look(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    if (info->dlpi_name == NULL)
        return 0;
    as_fdb_c |= has_name(info->dlpi_name, "libfdb_c.so");
    as_kvq |= has_name(info->dlpi_name, "libkvq_fdb_c.so");
    return 0;
}

int main(void)
{
    dl_iterate_phdr(look, NULL);
    if (!as_fdb_c || as_kvq) {
        fprintf(stderr, "the library was loaded as %s\n",
                as_kvq ? "libkvq_fdb_c.so" : "neither libfdb_c.so nor libkvq_fdb_c.so");
        return 1;
    }
    if (strcmp(fdb_get_error(0), "Success") != 0 || fdb_get_max_api_version() < 710) {
        fprintf(stderr, "libfdb_c.so is not kvq's FoundationDB API\n");
        return 1;
    }
    puts("linked as libfdb_c.so");
    return 0;
}
