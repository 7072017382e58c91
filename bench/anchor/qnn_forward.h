/* The forwarding core shared by this repository's libQnnHtp.so shims (bench/anchor/qnn_shim.c and the
 * test shims tests/data/qnn_fault_shim.c, tests/data/qnn_mem_shim.c).
 *
 * A shim is a library named libQnnHtp.so whose only export QNN needs is QnnInterface_getProviders.
 * qnnfwd_get_providers() loads the real library (its path in an environment variable the shim names),
 * asks it for its providers and hands out private copies of them, in which the shim has replaced the
 * entries it wraps (qnnfwd_replace). The real library's tables are never written: a runtime that loads
 * the real library directly in the same process sees it unchanged.
 *
 * The layout is QNN's QnnInterface_t (QnnInterface.h): backendId (u32), providerName (pointer at 8),
 * the core and backend API versions (2 x 3 u32, at 16), then the function table at 40, one pointer per
 * entry, in the order below (the table is append-only across QNN releases). QNN 2.51 (core API 2.40)
 * has 71 entries. A build may pass -DIFACE_BYTES and -D<NAME>_SLOT (the tests do, from qnnrt's
 * ctypes declaration of the same table): each is checked here against this header at compile time,
 * so the C and the Python definitions of the table cannot drift apart unnoticed. */
#ifndef QNNRT_QNN_FORWARD_H
#define QNNRT_QNN_FORWARD_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qnnfwd_rc; /* Qnn_ErrorHandle_t; the error code is its low 16 bits */
typedef qnnfwd_rc (*qnnfwd_providers_fn)(const void*** providers, uint32_t* count);

/* indices into the function table (QNN_INTERFACE_VER_TYPE) */
enum {
  QNNFWD_BACKEND_CREATE = 1,
  QNNFWD_CONTEXT_CREATE = 9,
  QNNFWD_CONTEXT_CREATE_FROM_BINARY = 13,
  QNNFWD_CONTEXT_FREE = 14,
  QNNFWD_GRAPH_CREATE = 15,
  QNNFWD_GRAPH_RETRIEVE = 20,
  QNNFWD_GRAPH_EXECUTE = 21,
  QNNFWD_MEM_REGISTER = 35,
  QNNFWD_MEM_DEREGISTER = 36,
  QNNFWD_DEVICE_GET_INFRASTRUCTURE = 39,
  QNNFWD_DEVICE_CREATE = 40,
  QNNFWD_SLOTS = 71
};
#define QNNFWD_TABLE_OFFSET 40
#define QNNFWD_IFACE_BYTES (QNNFWD_TABLE_OFFSET + QNNFWD_SLOTS * sizeof(void*))
#define QNNFWD_MAX_PROVIDERS 8

#ifdef IFACE_BYTES
_Static_assert(IFACE_BYTES == QNNFWD_IFACE_BYTES, "QnnInterface_t size differs from qnn_forward.h");
#endif
#ifdef EXEC_SLOT
_Static_assert(EXEC_SLOT == QNNFWD_GRAPH_EXECUTE, "graphExecute slot differs from qnn_forward.h");
#endif
#ifdef RETRIEVE_SLOT
_Static_assert(RETRIEVE_SLOT == QNNFWD_GRAPH_RETRIEVE, "graphRetrieve slot differs from qnn_forward.h");
#endif
#ifdef CONTEXT_FREE_SLOT
_Static_assert(CONTEXT_FREE_SLOT == QNNFWD_CONTEXT_FREE, "contextFree slot differs from qnn_forward.h");
#endif
#ifdef REGISTER_SLOT
_Static_assert(REGISTER_SLOT == QNNFWD_MEM_REGISTER, "memRegister slot differs from qnn_forward.h");
#endif
#ifdef DEREGISTER_SLOT
_Static_assert(DEREGISTER_SLOT == QNNFWD_MEM_DEREGISTER, "memDeRegister slot differs from qnn_forward.h");
#endif
#ifdef DEVICE_CREATE_SLOT
_Static_assert(DEVICE_CREATE_SLOT == QNNFWD_DEVICE_CREATE, "deviceCreate slot differs from qnn_forward.h");
#endif
#ifdef INFRASTRUCTURE_SLOT
_Static_assert(INFRASTRUCTURE_SLOT == QNNFWD_DEVICE_GET_INFRASTRUCTURE,
               "deviceGetInfrastructure slot differs from qnn_forward.h");
#endif
#ifdef CONTEXT_FROM_BINARY_SLOT
_Static_assert(CONTEXT_FROM_BINARY_SLOT == QNNFWD_CONTEXT_CREATE_FROM_BINARY,
               "contextCreateFromBinary slot differs from qnn_forward.h");
#endif

/* The function table of a provider copy. */
static inline void** qnnfwd_table(void* provider) {
  return (void**)((unsigned char*)provider + QNNFWD_TABLE_OFFSET);
}

/* Put `fn` in entry `slot` of a provider copy; the first time, keep what was there in *real (the
 * real library's function: the same in every provider of one library). */
static inline void qnnfwd_replace(void* provider, int slot, void* fn, void** real) {
  void** at = qnnfwd_table(provider) + slot;
  if (!*real) *real = *at;
  *at = fn;
}

/* QnnInterface_getProviders of a shim: the real library at getenv(real_env) is loaded once (by path,
 * RTLD_LOCAL); each call copies its providers afresh and lets patch(copy) replace entries in each copy.
 * `who` names the shim in error messages. */
static inline qnnfwd_rc qnnfwd_get_providers(const char* who, const char* real_env, void (*patch)(void*),
                                             const void*** out, uint32_t* count) {
  static qnnfwd_providers_fn get;
  static unsigned char copies[QNNFWD_MAX_PROVIDERS][QNNFWD_IFACE_BYTES];
  static const void* list[QNNFWD_MAX_PROVIDERS];
  if (!out || !count) return 1;
  if (!get) {
    const char* path = getenv(real_env);
    void* lib = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    get = lib ? (qnnfwd_providers_fn)dlsym(lib, "QnnInterface_getProviders") : NULL;
    if (!get) {
      fprintf(stderr, "%s: cannot load the real libQnnHtp.so from %s=%s%s%s\n", who, real_env,
              path ? path : "(unset)", lib || !path ? "" : ": ", lib || !path ? "" : dlerror());
      return 1;
    }
  }
  const void** real;
  uint32_t n = 0;
  qnnfwd_rc rc = get(&real, &n);
  if (rc) return rc;
  if (n > QNNFWD_MAX_PROVIDERS) {
    fprintf(stderr, "%s: the real library has %u providers, more than %d\n", who, n, QNNFWD_MAX_PROVIDERS);
    return 1;
  }
  for (uint32_t i = 0; i < n; ++i) {
    memcpy(copies[i], real[i], QNNFWD_IFACE_BYTES);
    patch(copies[i]);
    list[i] = copies[i];
  }
  *out = list;
  *count = n;
  return 0;
}

/* Does graph call `n` (counted from 1) fail under `spec`, and with which code? spec: a list of call
 * numbers, each "K" (that call) or "K-" (that call and every later one), separated by commas, then
 * optionally ":CODE" (default 1100, the DMA error of ExecuTorch issue 15985). "3", "3,7", "3-:1011". */
static inline int qnnfwd_fails(const char* spec, unsigned long n, qnnfwd_rc* code) {
  if (!spec || !*spec) return 0;
  const char* colon = strchr(spec, ':');
  for (const char* p = spec; *p && p != colon;) {
    char* end;
    unsigned long k = strtoul(p, &end, 10);
    if (end == p) return 0;
    int open = *end == '-';
    if (open ? n >= k : n == k) {
      *code = colon ? strtoull(colon + 1, NULL, 10) : 1100;
      return 1;
    }
    p = end + open;
    if (*p == ',') ++p;
  }
  return 0;
}

/* An environment flag: set, not empty and not "0". */
static inline int qnnfwd_flag(const char* name) {
  const char* v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

#endif
