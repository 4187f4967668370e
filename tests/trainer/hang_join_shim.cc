// LD_PRELOAD fault injection for TrainerProcessTest.TeardownThatHangsEndsWithTheOutcomesCode:
// every pthread_join blocks forever, so the trainer's teardown (the metrics server's stop
// joins its loop thread) hangs as a stuck mount or a bug would. Only the exit watchdog
// (trainer/stop/stop.h) can end such a process.
#include <pthread.h>
#include <unistd.h>

extern "C" int pthread_join(pthread_t /*thread*/, void** /*result*/) {
  for (;;) ::pause();
}
