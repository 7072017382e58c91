/* Shared buffers on a backend that has none: a libQnnHtp.so that forwards every call to the real
 * one (the x86 simulator) but implements memRegister / memDeRegister itself, and in graphExecute
 * turns mem-handle tensors back into client buffers over the registered memory before calling the
 * real graphExecute. With emulated_cdsprpc.c it lets the shared-buffer path run end to end here.
 *
 *   QNNRT_MEM_SHIM_REAL    path of the real libQnnHtp.so (required)
 *   QNNRT_MEM_SHIM_REFUSE  if set (not empty, not 0), memRegister refuses (QNN_MEM_ERROR_UNSUPPORTED_MEMTYPE)
 *   QNNRT_MEM_SHIM_NOOP    if set (not empty, not 0), graphExecute binds as usual but runs nothing
 *
 * memRegister takes QNN_MEM_TYPE_ION descriptors (the tensor at the start of the fd's memory) and
 * QNN_MEM_TYPE_CUSTOM ones with an HTP shared-buffer descriptor (QnnHtpMem.h: the fd, its total size
 * and the tensor's offset in it: several tensors in one allocation): it maps the fd (shared, so it
 * is the memory the client wrote) and checks the shape and data type fit at the offset. A handle is valid only on graphs of
 * the context it was registered with (graphRetrieve is watched to know a graph's context);
 * anything else is QNN_MEM_ERROR_INVALID_HANDLE, as is deregistering an unknown handle. A context
 * freed with registrations still live counts them (qnnrt_mem_freed_with_live) and drops them.
 * In-process tests read the counts with the qnnrt_mem_* functions below.
 *
 * The provider tables are copies made by the forwarding core bench/anchor/qnn_forward.h (built with
 * -I bench/anchor). Built by the tests with the Qnn_Tensor_t layout (-DTENSOR_BYTES, -DMEMTYPE_OFFSET,
 * -DDATA_OFFSET: where memType and the clientBuf / memHandle union sit) and, checked by the core
 * against its own, -DIFACE_BYTES and the slot index of each replaced function (-DREGISTER_SLOT ...). */
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "qnn_forward.h"

#ifndef TENSOR_BYTES
#error "build with -DTENSOR_BYTES, -DMEMTYPE_OFFSET and -DDATA_OFFSET (see the header comment)"
#endif
#define MEM_TYPE_ION 1
#define MEM_TYPE_CUSTOM 2
#define HTP_MEM_SHARED_BUFFER 1
#define TENSORMEMTYPE_RAW 0
#define TENSORMEMTYPE_MEMHANDLE 1
#define MEM_ERROR_INVALID_ARGUMENT 8000
#define MEM_ERROR_INVALID_HANDLE 8001
#define MEM_ERROR_MAPPING 8003
#define MEM_ERROR_INVALID_SHAPE 8004
#define MEM_ERROR_UNSUPPORTED_MEMTYPE 8005

typedef qnnfwd_rc ErrorHandle;
typedef ErrorHandle (*Execute)(void*, void*, uint32_t, void*, uint32_t, void*, void*);
typedef ErrorHandle (*Retrieve)(void*, const char*, void**);
typedef ErrorHandle (*ContextFree)(void*, void*);

/* Qnn_MemDescriptor_t (QnnMem.h) */
typedef struct {
  uint32_t numDim;
  uint32_t* dimSize;
  const char* shapeConfig;
} MemShape;
typedef struct {
  MemShape memShape;
  uint32_t dataType;
  uint32_t memType;
  union {
    int32_t ionFd;
    void* customInfo;
  } u;
} MemDescriptor;

/* QnnMemHtp_Descriptor_t (HTP/QnnHtpMem.h), the shared-buffer member of its union */
typedef struct {
  uint32_t type;
  uint64_t size;
  struct {
    int32_t fd;
    uint64_t offset;
  } shared;
} HtpMemDescriptor;

struct registration {
  uintptr_t id;
  void* context;
  void* base;   /* the fd's mapping */
  void* data;   /* base + the tensor's offset */
  size_t mapped;
  uint32_t bytes;
  struct registration* next;
};
struct graph_of {
  void* graph;
  void* context;
  struct graph_of* next;
};

static Execute real_execute;
static Retrieve real_retrieve;
static ContextFree real_context_free;
static struct registration* registrations;
static struct graph_of* graphs;
static uintptr_t next_id = 0x1000;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long registered, deregistered, live, executes_with_handles, bound_tensors, freed_with_live,
    registered_custom, registered_at_offset;

/* bytes of one element of a QNN data type: its low byte is the bit width (0x08, 0x16, 0x32, 0x64) */
static size_t element_bytes(uint32_t data_type) {
  switch (data_type & 0xFF) {
    case 0x08: return 1;
    case 0x16: return 2;
    case 0x32: return 4;
    case 0x64: return 8;
    default: return 0;
  }
}

static void drop(struct registration* r) {
  munmap(r->base, r->mapped);
  free(r);
  --live;
}

static ErrorHandle shim_register(void* context, const MemDescriptor* descs, uint32_t n, void** handles) {
  if (qnnfwd_flag("QNNRT_MEM_SHIM_REFUSE")) return MEM_ERROR_UNSUPPORTED_MEMTYPE;
  if (!descs || !handles) return MEM_ERROR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < n; ++i) {
    const MemDescriptor* d = &descs[i];
    int32_t fd;
    uint64_t offset = 0;
    if (d->memType == MEM_TYPE_ION) {
      fd = d->u.ionFd;
    } else if (d->memType == MEM_TYPE_CUSTOM) {
      const HtpMemDescriptor* h = d->u.customInfo;
      if (!h || h->type != HTP_MEM_SHARED_BUFFER) return MEM_ERROR_UNSUPPORTED_MEMTYPE;
      fd = h->shared.fd;
      offset = h->shared.offset;
    } else {
      return MEM_ERROR_UNSUPPORTED_MEMTYPE;
    }
    size_t bytes = element_bytes(d->dataType);
    for (uint32_t k = 0; k < d->memShape.numDim; ++k) bytes *= d->memShape.dimSize[k];
    struct stat st;
    if (bytes == 0 || fstat(fd, &st) != 0) return MEM_ERROR_INVALID_ARGUMENT;
    if ((uint64_t)st.st_size < offset || (uint64_t)st.st_size - offset < bytes) return MEM_ERROR_INVALID_SHAPE;
    if (d->memType == MEM_TYPE_CUSTOM && ((const HtpMemDescriptor*)d->u.customInfo)->size > (uint64_t)st.st_size)
      return MEM_ERROR_INVALID_ARGUMENT;
    void* p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return MEM_ERROR_MAPPING;
    struct registration* r = malloc(sizeof *r);
    if (!r) {
      munmap(p, (size_t)st.st_size);
      return MEM_ERROR_MAPPING;
    }
    pthread_mutex_lock(&lock);
    *r = (struct registration){next_id++, context, p, (char*)p + offset, (size_t)st.st_size, (uint32_t)bytes,
                               registrations};
    registrations = r;
    ++registered;
    registered_custom += d->memType == MEM_TYPE_CUSTOM;
    registered_at_offset += offset > 0;
    ++live;
    pthread_mutex_unlock(&lock);
    handles[i] = (void*)r->id;
  }
  return 0;
}

static ErrorHandle shim_deregister(void** handles, uint32_t n) {
  ErrorHandle rc = 0;
  pthread_mutex_lock(&lock);
  for (uint32_t i = 0; i < n; ++i) {
    struct registration** at = &registrations;
    while (*at && (*at)->id != (uintptr_t)handles[i]) at = &(*at)->next;
    if (!*at) {
      rc = MEM_ERROR_INVALID_HANDLE;
      continue;
    }
    struct registration* r = *at;
    *at = r->next;
    drop(r);
    ++deregistered;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static ErrorHandle shim_retrieve(void* context, const char* name, void** graph) {
  ErrorHandle rc = real_retrieve(context, name, graph);
  if (rc == 0 && graph && *graph) {
    struct graph_of* g = malloc(sizeof *g);
    if (g) {
      pthread_mutex_lock(&lock);
      *g = (struct graph_of){*graph, context, graphs};
      graphs = g;
      pthread_mutex_unlock(&lock);
    }
  }
  return rc;
}

static ErrorHandle shim_context_free(void* context, void* profile) {
  pthread_mutex_lock(&lock);
  for (struct registration** at = &registrations; *at;) {
    struct registration* r = *at;
    if (r->context == context) {
      *at = r->next;
      drop(r);
      ++freed_with_live;
    } else {
      at = &r->next;
    }
  }
  for (struct graph_of** at = &graphs; *at;) {
    struct graph_of* g = *at;
    if (g->context == context) {
      *at = g->next;
      free(g);
    } else {
      at = &g->next;
    }
  }
  pthread_mutex_unlock(&lock);
  return real_context_free(context, profile);
}

/* Rewrite the mem-handle tensors of `t` (n of them) as client buffers; lock held. */
static ErrorHandle unwrap(unsigned char* t, uint32_t n, void* context, long* count) {
  for (uint32_t i = 0; i < n; ++i, t += TENSOR_BYTES) {
    uint32_t* mem_type = (uint32_t*)(t + MEMTYPE_OFFSET);
    if (*mem_type != TENSORMEMTYPE_MEMHANDLE) continue;
    void** data = (void**)(t + DATA_OFFSET);
    struct registration* r = registrations;
    while (r && r->id != (uintptr_t)*data) r = r->next;
    if (!r || r->context != context) return MEM_ERROR_INVALID_HANDLE;
    *mem_type = TENSORMEMTYPE_RAW;
    *data = r->data;
    *(uint32_t*)(t + DATA_OFFSET + sizeof(void*)) = r->bytes;
    ++*count;
  }
  return 0;
}

static int has_handles(const unsigned char* t, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i, t += TENSOR_BYTES)
    if (*(const uint32_t*)(t + MEMTYPE_OFFSET) == TENSORMEMTYPE_MEMHANDLE) return 1;
  return 0;
}

static ErrorHandle shim_execute(void* g, void* in, uint32_t ni, void* out, uint32_t no, void* prof,
                                void* sig) {
  if (!has_handles(in, ni) && !has_handles(out, no))
    return qnnfwd_flag("QNNRT_MEM_SHIM_NOOP") ? 0 : real_execute(g, in, ni, out, no, prof, sig);
  unsigned char* ic = malloc((size_t)ni * TENSOR_BYTES + 1);
  unsigned char* oc = malloc((size_t)no * TENSOR_BYTES + 1);
  ErrorHandle rc = ic && oc ? 0 : MEM_ERROR_MAPPING;
  long count = 0;
  if (rc == 0) {
    memcpy(ic, in, (size_t)ni * TENSOR_BYTES);
    memcpy(oc, out, (size_t)no * TENSOR_BYTES);
    pthread_mutex_lock(&lock);
    void* context = NULL;
    for (struct graph_of* x = graphs; x; x = x->next)
      if (x->graph == g) context = x->context;
    rc = unwrap(ic, ni, context, &count);
    if (rc == 0) rc = unwrap(oc, no, context, &count);
    if (rc == 0) {
      ++executes_with_handles;
      bound_tensors += count;
    }
    pthread_mutex_unlock(&lock);
  }
  if (rc == 0 && !qnnfwd_flag("QNNRT_MEM_SHIM_NOOP")) rc = real_execute(g, ic, ni, oc, no, prof, sig);
  free(ic);
  free(oc);
  return rc;
}

#define COUNTER(name, var)                                                              \
  __attribute__((visibility("default"))) long name(void) {                             \
    return __atomic_load_n(&var, __ATOMIC_SEQ_CST);                                     \
  }
COUNTER(qnnrt_mem_registered, registered)
COUNTER(qnnrt_mem_deregistered, deregistered)
COUNTER(qnnrt_mem_live, live)
COUNTER(qnnrt_mem_executes_with_handles, executes_with_handles)
COUNTER(qnnrt_mem_bound_tensors, bound_tensors)
COUNTER(qnnrt_mem_freed_with_live, freed_with_live)
COUNTER(qnnrt_mem_registered_custom, registered_custom)
COUNTER(qnnrt_mem_registered_at_offset, registered_at_offset)

__attribute__((visibility("default"))) void qnnrt_mem_reset(void) {
  pthread_mutex_lock(&lock);
  registered = deregistered = executes_with_handles = bound_tensors = freed_with_live = registered_custom =
      registered_at_offset = 0;
  pthread_mutex_unlock(&lock);
}

static void patch(void* provider) {
  static void* unused_register;
  static void* unused_deregister;
  qnnfwd_replace(provider, QNNFWD_GRAPH_EXECUTE, (void*)shim_execute, (void**)&real_execute);
  qnnfwd_replace(provider, QNNFWD_GRAPH_RETRIEVE, (void*)shim_retrieve, (void**)&real_retrieve);
  qnnfwd_replace(provider, QNNFWD_CONTEXT_FREE, (void*)shim_context_free, (void**)&real_context_free);
  qnnfwd_replace(provider, QNNFWD_MEM_REGISTER, (void*)shim_register, &unused_register);
  qnnfwd_replace(provider, QNNFWD_MEM_DEREGISTER, (void*)shim_deregister, &unused_deregister);
}

__attribute__((visibility("default"))) ErrorHandle QnnInterface_getProviders(const void*** out, uint32_t* n) {
  return qnnfwd_get_providers("qnn_mem_shim", "QNNRT_MEM_SHIM_REAL", patch, out, n);
}
