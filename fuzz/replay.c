/* replay.c: runs a libFuzzer target over files without libFuzzer, so that the committed
 * corpora replay in every build (plain gcc, Release and ASan+UBSan) as ordinary ctest tests:
 * each argument, a file or a folder of files, is read whole and handed to
 * LLVMFuzzerTestOneInput once. A crash or a failed check in the target fails the test (the
 * sanitizer build catches memory errors the Release build would not). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *b = malloc(cap);
    for (size_t k; b != NULL && (k = fread(b + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) {
            uint8_t *c = realloc(b, cap *= 2);
            if (c == NULL)
                free(b);
            b = c;
        }
    }
    int bad = b == NULL || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(b);
        return 1;
    }
    LLVMFuzzerTestOneInput(b, n);
    free(b);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A folder's files in name order (the replay is the same on every machine). */
static int run_dir(const char *path, int *count)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        fprintf(stderr, "replay: cannot open folder %s\n", path);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **m = realloc(names, cap * sizeof *m);
            if (m == NULL)
                abort();
            names = m;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        if (names[n] == NULL)
            abort();
        snprintf(names[n++], len, "%s/%s", path, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad |= run_file(names[i]);
        free(names[i]);
        (*count)++;
    }
    free(names);
    return bad;
}

int main(int argc, char **argv)
{
    int bad = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such file or folder %s\n", argv[i]);
            bad = 1;
        } else if (S_ISDIR(st.st_mode)) {
            bad |= run_dir(argv[i], &count);
        } else {
            bad |= run_file(argv[i]);
            count++;
        }
    }
    printf("replay: %d inputs%s\n", count, bad ? ", some unreadable" : "");
    return bad || count == 0;
}
