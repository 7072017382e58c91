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
 * The provider table is copied (the real one is never written) with graphExecute replaced, by the
 * forwarding core bench/anchor/qnn_forward.h (built with -I bench/anchor). The test that builds this
 * file gives IFACE_BYTES and EXEC_SLOT as qnnrt declares them; the core checks them against its own. */
#include <time.h>

#include "qnn_forward.h" /* bench/anchor: the forwarding core every shim of this repository shares */

typedef qnnfwd_rc (*Execute)(void*, void*, uint32_t, void*, uint32_t, void*, void*);

static Execute real_execute;
static unsigned long calls;

static qnnfwd_rc faulty_execute(void* g, void* in, uint32_t ni, void* out, uint32_t no, void* prof,
                                void* sig) {
  unsigned long n = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
  qnnfwd_rc code;
  if (qnnfwd_fails(getenv("QNNRT_FAULT_EXEC"), n, &code)) {
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

static void patch(void* provider) {
  qnnfwd_replace(provider, QNNFWD_GRAPH_EXECUTE, (void*)faulty_execute, (void**)&real_execute);
}

__attribute__((visibility("default"))) qnnfwd_rc QnnInterface_getProviders(const void*** out, uint32_t* n) {
  return qnnfwd_get_providers("qnn_fault_shim", "QNNRT_FAULT_REAL", patch, out, n);
}
