/* Loaded with LD_PRELOAD by tests/test_emulator_host.py: it makes PyTorch's race at exit happen on demand.
 *
 * Every autograd worker thread calls PyThreadState_New as it starts, to take the GIL once
 * (python_engine.cpp, PythonEngine::thread_init). Here the worker threads wait there first:
 * - the first one PyTorch created (the lowest thread id: emulated:0's) for LATE_THREAD_DELAY_MS;
 * - the others, which have no work, until the interpreter begins to finalize (at most 3 s): as a worker
 *   the OS has not run yet on a busy machine, when the script ends.
 * A script can also release them from a __del__ that runs while the interpreter finalizes, with
 * late_thread_release(): it lets every held worker go on and waits (at most 2 s) until each has made its
 * Python state, so the worker's request for the GIL comes while the interpreter finalizes however
 * busy the machine is (polling for the finalization could miss it on a loaded machine).
 * PyThread_exit_thread is CPython's end for a thread that asks for the GIL while the interpreter
 * finalizes: it says so on stderr first. Both print a line, so a test can tell the library was in effect. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void say(const char *line) { (void)!write(2, line, strlen(line)); }

static void sleep_ms(long ms) {
  struct timespec delay = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&delay, NULL);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long lowest_tid = 0;
static volatile int released = 0;
static volatile int held = 0; /* workers waiting here for the finalization */

void late_thread_release(void) {
  released = 1;
  for (int waited = 0; waited < 2000 && held > 0; waited += 1) sleep_ms(1);
}

void *PyThreadState_New(void *interp) {
  void *(*real)(void *) = (void *(*)(void *))dlsym(RTLD_NEXT, "PyThreadState_New");
  const char *ms = getenv("LATE_THREAD_DELAY_MS");
  long tid = syscall(SYS_gettid);
  if (ms == NULL || tid == getpid()) return real(interp);
  say("late-thread: a worker's Python state is made late\n");
  pthread_mutex_lock(&lock);
  if (lowest_tid == 0 || tid < lowest_tid) lowest_tid = tid;
  pthread_mutex_unlock(&lock);
  sleep_ms(atol(ms));  /* by now every worker has arrived */
  pthread_mutex_lock(&lock);
  int first = tid == lowest_tid;
  pthread_mutex_unlock(&lock);
  if (!first) {
    int (*finalizing)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
    if (finalizing == NULL) finalizing = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsFinalizing");
    __sync_fetch_and_add(&held, 1);
    for (int waited = 0; waited < 3000 && !released && finalizing != NULL && !finalizing(); waited += 5) sleep_ms(5);
    void *state = real(interp);
    __sync_fetch_and_sub(&held, 1);
    return state;
  }
  return real(interp);
}

void PyThread_exit_thread(void) {
  void (*real)(void) = (void (*)(void))dlsym(RTLD_NEXT, "PyThread_exit_thread");
  say("late-thread: a worker asked for the GIL while the interpreter finalized\n");
  real();
  abort(); /* not reached: the real one ends the thread */
}
