/* A stand-in for a QNN library's logging: it keeps the registered QnnLog_Callback_t and calls it the
 * way QNN does, void(const char* fmt, QnnLog_Level_t level, uint64_t timestamp, va_list args), from a
 * variadic function, so the callback gets a live va_list. Built at test time with the system cc (or
 * aarch64-linux-gnu-gcc for the arm64 check). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define EXPORT __declspec(dllexport)
#else
#define EXPORT __attribute__((visibility("default")))
#endif

typedef enum { LOG_ERROR = 1, LOG_WARN = 2, LOG_INFO = 3, LOG_VERBOSE = 4, LOG_DEBUG = 5,
               LOG_MAX = 0x7fffffff } QnnLog_Level_t;
typedef void (*QnnLog_Callback_t)(const char* fmt, QnnLog_Level_t level, uint64_t timestamp,
                                  va_list args);

static QnnLog_Callback_t g_cb;

EXPORT void fake_register(QnnLog_Callback_t cb) { g_cb = cb; }

static void qnn_log(QnnLog_Level_t level, uint64_t ts, const char* fmt, ...) {
  va_list ap;
  if (!g_cb) return;
  va_start(ap, fmt);
  g_cb(fmt, level, ts, ap);
  va_end(ap);
}

/* Each case is one message; the Python side knows the expected text of case i. */
EXPORT int fake_emit(int i) {
  switch (i) {
    case 0: qnn_log(LOG_ERROR, 1000, "int %d neg %d hex %x", 42, -7, 255); break;
    case 1: qnn_log(LOG_WARN, 1001, "str <%s> <%-6s|%5s>", "htp", "v73", "ctx"); break;
    case 2: qnn_log(LOG_INFO, 1002, "size_t %zu bytes, %zx", (size_t)1234567890123ULL, (size_t)0xdeadbeefUL); break;
    case 3: qnn_log(LOG_VERBOSE, 1003, "double %.3f %g %e", 3.14159, 0.5, 12345.678); break;
    case 4: qnn_log(LOG_DEBUG, 1004, "mixed %s=%d (%zu) %.2f %u %llu %c%%", "ctx", -1, (size_t)7, 2.5,
                    4000000000u, 18446744073709551615ULL, 'x'); break;
    /* past the registers: 9 ints and 10 doubles spill to the stack on SysV x86_64 and AAPCS64 */
    case 5: qnn_log(LOG_INFO, 1005, "many %d %d %d %d %d %d %d %d %d | %.1f %.1f %.1f %.1f %.1f %.1f %.1f "
                    "%.1f %.1f %.1f | %s %zu", 1, 2, 3, 4, 5, 6, 7, 8, 9, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5,
                    7.5, 8.5, 9.5, 10.5, "end", (size_t)99); break;
    case 6: qnn_log(LOG_WARN, 1006, "no args at all"); break;
    default: return -1;
  }
  return 0;
}

EXPORT int fake_num_cases(void) { return 7; }
