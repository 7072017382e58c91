/* A fault injector for the recovery tests: a libQnnHtp.so that forwards every call to the real
 * one and makes chosen graphExecute calls of this process fail without running them
 * (QNNRT_FAULT_EXEC), or every one take longer (QNNRT_FAULT_SLEEP_MS).
 *
 *   QNNRT_FAULT_REAL   path of the real libQnnHtp.so (required)
 *   QNNRT_FAULT_EXEC   which calls fail, counted from 1 per process, and the code (default 1100):
 *                      "3" | "3,7" | "3-" (the 3rd and every later one), optionally ":CODE"
 *   QNNRT_FAULT_LOG    if set, append one line per injected failure to this file
 * In-process tests read and reset the count with qnnrt_fault_calls() / qnnrt_fault_reset().
 *
 * The provider table is copied (the real one is never written) with graphExecute replaced.
 * IFACE_BYTES (the size of QnnInterface_t as qnnrt reads it) and EXEC_SLOT (graphExecute's index
 * in its function table) are given by the test that builds this file. */
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef IFACE_BYTES
#error "build with -DIFACE_BYTES=<sizeof QnnInterface_t> -DEXEC_SLOT=<index of graphExecute>"
#endif
#define FN_TABLE_OFFSET 40 /* backendId, providerName, apiVersion, then the function table */
#define MAX_PROVIDERS 8

typedef uint64_t ErrorHandle;
typedef ErrorHandle (*GetProviders)(const void***, uint32_t*);
typedef ErrorHandle (*Execute)(void*, void*, uint32_t, void*, uint32_t, void*, void*);

static Execute real_execute;
static unsigned long calls;
static unsigned char copies[MAX_PROVIDERS][IFACE_BYTES];
static const void* list[MAX_PROVIDERS];

/* does call `n` fail, and with which code? */
static int injected(unsigned long n, ErrorHandle* code) {
  const char* spec = getenv("QNNRT_FAULT_EXEC");
  if (!spec || !*spec) return 0;
  const char* colon = strchr(spec, ':');
  *code = colon ? strtoull(colon + 1, NULL, 10) : 1100;
  for (const char* p = spec; *p && p != colon;) {
    char* end;
    unsigned long k = strtoul(p, &end, 10);
    if (end == p) return 0;
    if (*end == '-' ? n >= k : n == k) return 1;
    p = end + (*end == '-');
    if (*p == ',') ++p;
  }
  return 0;
}

static ErrorHandle faulty_execute(void* g, void* in, uint32_t ni, void* out, uint32_t no, void* prof,
                                  void* sig) {
  unsigned long n = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
  ErrorHandle code;
  if (injected(n, &code)) {
    const char* path = getenv("QNNRT_FAULT_LOG");
    FILE* f = path && *path ? fopen(path, "a") : NULL;
    if (f) {
      fprintf(f, "graphExecute call %lu failed with %llu (injected)\n", n, (unsigned long long)code);
      fclose(f);
    }
    return code;
  }
  const char* sleep_ms = getenv("QNNRT_FAULT_SLEEP_MS");   /* a slow accelerator, for progress */
  if (sleep_ms && *sleep_ms) {
    unsigned long ms = strtoul(sleep_ms, NULL, 10);
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  return real_execute(g, in, ni, out, no, prof, sig);
}

__attribute__((visibility("default"))) unsigned long qnnrt_fault_calls(void) {
  return __atomic_load_n(&calls, __ATOMIC_SEQ_CST);
}

__attribute__((visibility("default"))) void qnnrt_fault_reset(void) {
  __atomic_store_n(&calls, 0, __ATOMIC_SEQ_CST);
}

__attribute__((visibility("default"))) ErrorHandle QnnInterface_getProviders(const void*** out,
                                                                              uint32_t* n) {
  const char* path = getenv("QNNRT_FAULT_REAL");
  void* lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  GetProviders get = lib ? (GetProviders)dlsym(lib, "QnnInterface_getProviders") : NULL;
  if (!get) {
    fprintf(stderr, "qnn_fault_shim: cannot load QNNRT_FAULT_REAL=%s\n", path ? path : "(unset)");
    return 1;
  }
  const void** real;
  ErrorHandle rc = get(&real, n);
  if (rc || *n > MAX_PROVIDERS) return rc ? rc : 1;
  for (uint32_t i = 0; i < *n; ++i) {
    memcpy(copies[i], real[i], IFACE_BYTES);
    void** slot = (void**)(copies[i] + FN_TABLE_OFFSET) + EXEC_SLOT;
    if (!real_execute) real_execute = (Execute)*slot;
    *slot = (void*)faulty_execute;
    list[i] = copies[i];
  }
  *out = list;
  return 0;
}
