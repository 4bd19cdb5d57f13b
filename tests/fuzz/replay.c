/* SPDX-License-Identifier: MIT */
/*
 * fuzz_mapping_replay: run the fuzz harness over inputs without libFuzzer,
 * so any compiler, valgrind or a sanitizer build can check the corpus.
 *
 *   fuzz_mapping_replay FILE|DIR...
 *
 * Directories are read one level deep, files in name order. Exits 0 when
 * every input ran (a failing check aborts), 1 on an unreadable path or
 * when no input was found.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_mapping.h"

static int run_file(const char *path)
{
	FILE *fp = fopen(path, "rb");
	if (!fp) {
		perror(path);
		return -1;
	}
	size_t cap = 4096, n = 0;
	unsigned char *data = malloc(cap);
	if (!data) {
		fclose(fp);
		return -1;
	}
	size_t got;
	while ((got = fread(data + n, 1, cap - n, fp)) > 0) {
		n += got;
		if (n == cap) {
			unsigned char *bigger = realloc(data, cap * 2);
			if (!bigger) {
				free(data);
				fclose(fp);
				return -1;
			}
			data = bigger;
			cap *= 2;
		}
	}
	fclose(fp);
	if (getenv("FUZZ_TRACE"))
		fprintf(stderr, "== %s (%zu bytes)\n", path, n);
	LLVMFuzzerTestOneInput(data, n);
	free(data);
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run every regular file in a directory; returns the count or -1. */
static int run_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d) {
		perror(dir);
		return -1;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			char **bigger = realloc(names, cap * sizeof(*names));
			if (!bigger)
				break;
			names = bigger;
		}
		size_t len = strlen(dir) + strlen(de->d_name) + 2;
		names[n] = malloc(len);
		if (!names[n])
			break;
		snprintf(names[n], len, "%s/%s", dir, de->d_name);
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_names);
	int count = 0;
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
			if (run_file(names[i]))
				count = -1;
			else if (count >= 0)
				count++;
		}
		free(names[i]);
	}
	free(names);
	return count;
}

int main(int argc, char **argv)
{
	LLVMFuzzerInitialize(&argc, &argv);
	int total = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st)) {
			perror(argv[i]);
			return 1;
		}
		int r = S_ISDIR(st.st_mode) ? run_dir(argv[i])
					    : (run_file(argv[i]) ? -1 : 1);
		if (r < 0)
			return 1;
		total += r;
	}
	printf("replayed %d inputs\n", total);
	return total ? 0 : 1;
}
