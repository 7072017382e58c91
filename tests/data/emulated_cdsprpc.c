/* An emulated libcdsprpc for the shared-buffer tests: rpcmem over host memory.
 *
 * Each rpcmem_alloc is a memfd of its own, mapped shared: the pointer is its mapping's start and
 * rpcmem_to_fd gives its file descriptor, as the DSP's library does with ION / DMA-BUF memory. The
 * QNN shim of the tests (qnn_mem_shim.c) maps the same fd in memRegister, so both see one memory.
 * rpcmem_free unmaps and closes; a pointer it did not hand out is ignored (as the real one does).
 * In-process tests read the counts with rpcmem_emul_allocs() / _frees() / _live(). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

struct block {
  void* base;
  size_t size;
  int fd;
  struct block* next;
};

static struct block* blocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long allocs, frees, live;

#define EXPORT __attribute__((visibility("default")))

EXPORT void rpcmem_init(void) {}
EXPORT void rpcmem_deinit(void) {}

EXPORT void* rpcmem_alloc(int heapid, uint32_t flags, int size) {
  (void)heapid;
  (void)flags;
  if (size <= 0) return NULL;
  int fd = memfd_create("rpcmem", MFD_CLOEXEC);
  if (fd < 0) return NULL;
  if (ftruncate(fd, size) != 0) {
    close(fd);
    return NULL;
  }
  void* p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  struct block* b = p == MAP_FAILED ? NULL : malloc(sizeof *b);
  if (!b) {
    if (p != MAP_FAILED) munmap(p, (size_t)size);
    close(fd);
    return NULL;
  }
  b->base = p;
  b->size = (size_t)size;
  b->fd = fd;
  pthread_mutex_lock(&lock);
  b->next = blocks;
  blocks = b;
  ++allocs;
  ++live;
  pthread_mutex_unlock(&lock);
  return p;
}

EXPORT void rpcmem_free(void* p) {
  pthread_mutex_lock(&lock);
  for (struct block** at = &blocks; *at; at = &(*at)->next) {
    struct block* b = *at;
    if (b->base == p) {
      *at = b->next;
      munmap(b->base, b->size);
      close(b->fd);
      free(b);
      ++frees;
      --live;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

EXPORT int rpcmem_to_fd(void* p) {
  int fd = -1;
  pthread_mutex_lock(&lock);
  for (struct block* b = blocks; b; b = b->next)
    if (b->base == p) fd = b->fd;
  pthread_mutex_unlock(&lock);
  return fd;
}

EXPORT long rpcmem_emul_allocs(void) { return __atomic_load_n(&allocs, __ATOMIC_SEQ_CST); }
EXPORT long rpcmem_emul_frees(void) { return __atomic_load_n(&frees, __ATOMIC_SEQ_CST); }
EXPORT long rpcmem_emul_live(void) { return __atomic_load_n(&live, __ATOMIC_SEQ_CST); }
