/* libQnnHtp.so for side-by-side runs of ExecuTorch and qnnrt on the x86 HTP simulator: it forwards
 * every call to the real library (onnxruntime-qnn's QNN 2.51 libQnnHtp.so) through the copies of
 * qnn_forward.h, and wraps a few entries. README.md beside this file tells how to use it.
 *
 *   QNN_SHIM_REAL           path of the real libQnnHtp.so (required)
 *   QNN_SHIM_NO_FIX=1       pass HTP device custom configs through as given. Without it they are
 *                           re-laid for QNN 2.51: ExecuTorch 1.5.1 was built against headers in which
 *                           QnnHtpDevice_CustomConfig_t's union sits at offset 4; in 2.51 a pointer
 *                           joined the union, which moved it to 8. Set it for qnnrt (it speaks 2.51).
 *   QNN_SHIM_KEEP_PLATFORM=1  keep platform-info device configs; without it they are dropped (the x86
 *                           library rejects the one ExecuTorch passes). Set it for qnnrt.
 *   QNN_SHIM_TIME_FILE=F    count graphExecute calls and the nanoseconds spent in them, as two
 *                           little-endian uint64 at the start of F (created if missing, mapped shared,
 *                           added to atomically: several processes may share one file, and a process
 *                           that ends without running exit handlers has still counted)
 *   QNN_SHIM_COUNT=1        at exit, print this process's counts of contextCreateFromBinary,
 *                           graphExecute and contextFree to stderr
 *   QNN_SHIM_NOOP_EXEC=1    graphExecute returns success without running: a runtime's own cost per
 *                           graph call, free of the simulator's time (outputs are left as they were)
 *   QNN_SHIM_FAIL_EXEC=S    the graphExecute calls S names fail without running: "3", "3,5", "3-" (the
 *                           3rd and every later one), optionally ":CODE" (default 1100); counted per
 *                           process from 1
 *   QNN_SHIM_PERF_LOG=F     append one line to F per call of the HTP performance infrastructure
 *                           (deviceGetInfrastructure, createPowerConfigId, setPowerConfig with each
 *                           config's option and its first 64 bytes, setMemoryConfig, destroyPowerConfigId)
 *                           and per memRegister
 *   QNN_SHIM_VERBOSE=1      say on stderr what the shim does (each device config, repacked or dropped,
 *                           each injected failure)
 * All are read when the runtime first asks the shim for its providers.
 *
 * Build: cc -O2 -shared -fPIC -Wl,-z,nodelete -o libQnnHtp.so qnn_shim.c -ldl
 * (nodelete: a runtime that dlclose()s the backend must not unload the exit handler of QNN_SHIM_COUNT). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "qnn_forward.h"

#define WHO "qnn_shim"

/* QnnDevice_Config_t (QnnDevice.h): option, then a union of pointers at 8 */
typedef struct {
  uint32_t option;
  void* ptr;
} DeviceConfig;
#define DEVICE_CONFIG_CUSTOM 0
#define DEVICE_CONFIG_PLATFORM_INFO 1
/* QnnHtpDevice_CustomConfig_t: option (u32) and a union of 8 bytes at most in the old headers, at 4
 * there and at 8 in QNN 2.51's (whose union holds a pointer) */
#define OLD_UNION_OFFSET 4
#define NEW_UNION_OFFSET 8
#define UNION_BYTES 8
#define NEW_CUSTOM_BYTES 32 /* room for 2.51's config, whatever its union's size beyond 8 */
#define MAX_DEVICE_CONFIGS 32

typedef qnnfwd_rc (*DeviceCreate)(void* logger, const DeviceConfig** configs, void** device);
typedef qnnfwd_rc (*Execute)(void* graph, const void* in, uint32_t n_in, void* out, uint32_t n_out, void* profile,
                             void* signal);
typedef qnnfwd_rc (*FromBinary)(void* backend, void* device, const void** configs, const void* binary,
                                uint64_t size, void** context, void* profile);
typedef qnnfwd_rc (*ContextFree)(void* context, void* profile);
typedef qnnfwd_rc (*GetInfrastructure)(void** infrastructure);
typedef qnnfwd_rc (*MemRegister)(void* context, const void* descriptors, uint32_t n, void** handles);

/* QnnHtpDevice_Infrastructure_t: infraType (u32), then at 8 the perf table (HTP/QnnHtpDevice.h) */
typedef struct {
  qnnfwd_rc (*createPowerConfigId)(uint32_t device, uint32_t core, uint32_t* id);
  qnnfwd_rc (*destroyPowerConfigId)(uint32_t id);
  qnnfwd_rc (*setPowerConfig)(uint32_t id, const void** configs);
  qnnfwd_rc (*setMemoryConfig)(uint32_t device, uint32_t core, const void** configs);
} PerfTable;
typedef struct {
  uint32_t type;
  PerfTable perf;
} Infrastructure;
#define POWER_CONFIG_LOGGED_BYTES 64 /* of QnnHtpPerfInfrastructure_PowerConfig_t's 68 */
#define MEMORY_CONFIG_BYTES 8        /* QnnHtpPerfInfrastructure_MemoryConfig_t */

static struct {
  int ready, verbose, fix_custom, keep_platform, count, noop;
  const char* fail;
  volatile uint64_t* timing; /* [0] graphExecute calls, [1] ns inside them */
  FILE* perf;
} opt;

static DeviceCreate real_device_create;
static Execute real_execute;
static FromBinary real_from_binary;
static ContextFree real_context_free;
static GetInfrastructure real_get_infrastructure;
static MemRegister real_mem_register;
static PerfTable real_perf;
static Infrastructure our_infrastructure;

static unsigned long n_exec, n_exec_ok, n_from_binary, n_from_binary_ok, n_context_free;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void add(unsigned long* counter) { __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED); }

/* ---- device configs: re-lay custom ones for 2.51, drop platform info ---- */
static qnnfwd_rc shim_device_create(void* logger, const DeviceConfig** configs, void** device) {
  const DeviceConfig* kept[MAX_DEVICE_CONFIGS + 1];
  DeviceConfig relaid[MAX_DEVICE_CONFIGS];
  uint64_t custom_words[MAX_DEVICE_CONFIGS][NEW_CUSTOM_BYTES / 8]; /* aligned as the struct QNN reads */
  int n = 0, i = 0;
  for (; configs && configs[i] && n < MAX_DEVICE_CONFIGS; ++i) {
    const DeviceConfig* c = configs[i];
    if (opt.verbose) fprintf(stderr, "[" WHO "] deviceCreate config %d: option %u", i, c->option);
    if (c->option == DEVICE_CONFIG_PLATFORM_INFO && !opt.keep_platform) {
      if (opt.verbose) fprintf(stderr, " (platform info): dropped\n");
      continue;
    }
    if (c->option == DEVICE_CONFIG_CUSTOM && c->ptr && opt.fix_custom) {
      const unsigned char* old = c->ptr;
      unsigned char* custom = (unsigned char*)custom_words[n];
      memset(custom, 0, NEW_CUSTOM_BYTES);
      memcpy(custom, old, sizeof(uint32_t));
      memcpy(custom + NEW_UNION_OFFSET, old + OLD_UNION_OFFSET, UNION_BYTES);
      relaid[n] = *c;
      relaid[n].ptr = custom;
      if (opt.verbose) {
        uint32_t w[3];
        memcpy(w, custom, sizeof(uint32_t));
        memcpy(w + 1, custom + NEW_UNION_OFFSET, 2 * sizeof(uint32_t));
        fprintf(stderr, " (HTP custom option %u, union %u %u): union moved from offset 4 to 8", w[0], w[1], w[2]);
      }
      kept[n] = &relaid[n];
    } else {
      kept[n] = c;
    }
    if (opt.verbose) fprintf(stderr, "\n");
    ++n;
  }
  if (configs && configs[i]) {
    fprintf(stderr, "[" WHO "] deviceCreate: more than %d configs, passed through unchanged\n", MAX_DEVICE_CONFIGS);
    return real_device_create(logger, configs, device);
  }
  kept[n] = NULL;
  qnnfwd_rc rc = real_device_create(logger, configs ? kept : NULL, device);
  if (opt.verbose) fprintf(stderr, "[" WHO "] deviceCreate -> %llu\n", (unsigned long long)rc);
  return rc;
}

/* ---- graphExecute: time, count, no-op, injected failures ---- */
static qnnfwd_rc shim_execute(void* graph, const void* in, uint32_t n_in, void* out, uint32_t n_out, void* profile,
                              void* signal) {
  unsigned long n = __atomic_add_fetch(&n_exec, 1, __ATOMIC_RELAXED);
  qnnfwd_rc rc;
  if (qnnfwd_fails(opt.fail, n, &rc)) {
    if (opt.verbose) fprintf(stderr, "[" WHO "] graphExecute call %lu fails with %llu (injected)\n", n,
                             (unsigned long long)rc);
    return rc;
  }
  uint64_t t0 = opt.timing ? now_ns() : 0;
  rc = opt.noop ? 0 : real_execute(graph, in, n_in, out, n_out, profile, signal);
  if (opt.timing) {
    uint64_t dt = now_ns() - t0;
    __atomic_add_fetch(&opt.timing[0], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&opt.timing[1], dt, __ATOMIC_RELAXED);
  }
  if (!rc) add(&n_exec_ok);
  return rc;
}

static qnnfwd_rc shim_from_binary(void* backend, void* device, const void** configs, const void* binary,
                                  uint64_t size, void** context, void* profile) {
  qnnfwd_rc rc = real_from_binary(backend, device, configs, binary, size, context, profile);
  add(&n_from_binary);
  if (!rc) add(&n_from_binary_ok);
  return rc;
}

static qnnfwd_rc shim_context_free(void* context, void* profile) {
  add(&n_context_free);
  return real_context_free(context, profile);
}

static void report_counts(void) {
  fprintf(stderr, "[" WHO "] pid %d: contextCreateFromBinary %lu (%lu ok), graphExecute %lu (%lu ok), "
          "contextFree %lu\n", (int)getpid(), n_from_binary, n_from_binary_ok, n_exec, n_exec_ok, n_context_free);
}

/* ---- the perf infrastructure log ---- */
static void log_bytes(const void* p, int bytes) {
  const unsigned char* b = p;
  for (int k = 0; k < bytes; ++k) fprintf(opt.perf, "%02x", b[k]);
  fputc('\n', opt.perf);
}

static qnnfwd_rc shim_create_power_config_id(uint32_t device, uint32_t core, uint32_t* id) {
  qnnfwd_rc rc = real_perf.createPowerConfigId(device, core, id);
  fprintf(opt.perf, "createPowerConfigId dev=%u core=%u -> %llu id=%u\n", device, core, (unsigned long long)rc,
          id ? *id : 0);
  fflush(opt.perf);
  return rc;
}

static qnnfwd_rc shim_destroy_power_config_id(uint32_t id) {
  qnnfwd_rc rc = real_perf.destroyPowerConfigId(id);
  fprintf(opt.perf, "destroyPowerConfigId id=%u -> %llu\n", id, (unsigned long long)rc);
  fflush(opt.perf);
  return rc;
}

static qnnfwd_rc shim_set_power_config(uint32_t id, const void** configs) {
  qnnfwd_rc rc = real_perf.setPowerConfig(id, configs);
  for (int i = 0; configs && configs[i]; ++i) {
    fprintf(opt.perf, "setPowerConfig id=%u cfg[%d] option=%u bytes=", id, i, *(const uint32_t*)configs[i]);
    log_bytes(configs[i], POWER_CONFIG_LOGGED_BYTES);
  }
  fprintf(opt.perf, "setPowerConfig id=%u -> %llu\n", id, (unsigned long long)rc);
  fflush(opt.perf);
  return rc;
}

static qnnfwd_rc shim_set_memory_config(uint32_t device, uint32_t core, const void** configs) {
  qnnfwd_rc rc = real_perf.setMemoryConfig(device, core, configs);
  for (int i = 0; configs && configs[i]; ++i) {
    fprintf(opt.perf, "setMemoryConfig dev=%u core=%u cfg[%d] option=%u bytes=", device, core, i,
            *(const uint32_t*)configs[i]);
    log_bytes(configs[i], MEMORY_CONFIG_BYTES);
  }
  fprintf(opt.perf, "setMemoryConfig dev=%u core=%u -> %llu\n", device, core, (unsigned long long)rc);
  fflush(opt.perf);
  return rc;
}

/* Hands out our copy of the infrastructure, with the perf entries wrapped (NULL ones stay NULL). */
static qnnfwd_rc shim_get_infrastructure(void** infrastructure) {
  qnnfwd_rc rc = real_get_infrastructure(infrastructure);
  if (rc || !infrastructure || !*infrastructure) {
    fprintf(opt.perf, "deviceGetInfrastructure -> %llu\n", (unsigned long long)rc);
    fflush(opt.perf);
    return rc;
  }
  const Infrastructure* real = *infrastructure;
  if (!real_perf.createPowerConfigId && !real_perf.destroyPowerConfigId && !real_perf.setPowerConfig)
    real_perf = real->perf;
  our_infrastructure.type = real->type;
  our_infrastructure.perf.createPowerConfigId = real_perf.createPowerConfigId ? shim_create_power_config_id : NULL;
  our_infrastructure.perf.destroyPowerConfigId = real_perf.destroyPowerConfigId ? shim_destroy_power_config_id : NULL;
  our_infrastructure.perf.setPowerConfig = real_perf.setPowerConfig ? shim_set_power_config : NULL;
  our_infrastructure.perf.setMemoryConfig = real_perf.setMemoryConfig ? shim_set_memory_config : NULL;
  *infrastructure = &our_infrastructure;
  fprintf(opt.perf, "deviceGetInfrastructure type=%u\n", real->type);
  fflush(opt.perf);
  return rc;
}

static qnnfwd_rc shim_mem_register(void* context, const void* descriptors, uint32_t n, void** handles) {
  qnnfwd_rc rc = real_mem_register(context, descriptors, n, handles);
  fprintf(opt.perf, "memRegister n=%u -> %llu\n", n, (unsigned long long)rc);
  fflush(opt.perf);
  return rc;
}

/* ---- set-up ---- */
static volatile uint64_t* map_time_file(const char* path) {
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  if (fd < 0) {
    perror("[" WHO "] QNN_SHIM_TIME_FILE");
    return NULL;
  }
  void* m = MAP_FAILED;
  if (lseek(fd, 0, SEEK_END) >= 16 || ftruncate(fd, 16) == 0)
    m = mmap(NULL, 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    perror("[" WHO "] QNN_SHIM_TIME_FILE");
    return NULL;
  }
  return m;
}

static void read_options(void) {
  if (opt.ready) return;
  opt.ready = 1;
  opt.verbose = qnnfwd_flag("QNN_SHIM_VERBOSE");
  opt.fix_custom = !qnnfwd_flag("QNN_SHIM_NO_FIX");
  opt.keep_platform = qnnfwd_flag("QNN_SHIM_KEEP_PLATFORM");
  opt.count = qnnfwd_flag("QNN_SHIM_COUNT");
  opt.noop = qnnfwd_flag("QNN_SHIM_NOOP_EXEC");
  opt.fail = getenv("QNN_SHIM_FAIL_EXEC");
  if (opt.fail && !*opt.fail) opt.fail = NULL;
  const char* tf = getenv("QNN_SHIM_TIME_FILE");
  if (tf && *tf) opt.timing = map_time_file(tf);
  const char* pl = getenv("QNN_SHIM_PERF_LOG");
  if (pl && *pl && !(opt.perf = fopen(pl, "a"))) perror("[" WHO "] QNN_SHIM_PERF_LOG");
  if (opt.count) atexit(report_counts);
}

/* wrap an entry the real library has (a NULL one stays NULL: the runtime sees it missing) */
static void wrap(void* provider, int slot, void* fn, void** real) {
  if (qnnfwd_table(provider)[slot]) qnnfwd_replace(provider, slot, fn, real);
}

static void patch(void* provider) {
  if (opt.fix_custom || !opt.keep_platform || opt.verbose)
    wrap(provider, QNNFWD_DEVICE_CREATE, (void*)shim_device_create, (void**)&real_device_create);
  if (opt.timing || opt.count || opt.noop || opt.fail) {
    wrap(provider, QNNFWD_GRAPH_EXECUTE, (void*)shim_execute, (void**)&real_execute);
    wrap(provider, QNNFWD_CONTEXT_CREATE_FROM_BINARY, (void*)shim_from_binary, (void**)&real_from_binary);
    wrap(provider, QNNFWD_CONTEXT_FREE, (void*)shim_context_free, (void**)&real_context_free);
  }
  if (opt.perf) {
    wrap(provider, QNNFWD_DEVICE_GET_INFRASTRUCTURE, (void*)shim_get_infrastructure, (void**)&real_get_infrastructure);
    wrap(provider, QNNFWD_MEM_REGISTER, (void*)shim_mem_register, (void**)&real_mem_register);
  }
}

__attribute__((visibility("default"))) qnnfwd_rc QnnInterface_getProviders(const void*** providers,
                                                                            uint32_t* count) {
  read_options();
  return qnnfwd_get_providers(WHO, "QNN_SHIM_REAL", patch, providers, count);
}
