/* Pod sandbox ("pause") process for the real-node tests, built static by
 * tests/cluster/build-images: it holds the pod's namespaces, sleeps until
 * SIGTERM or SIGINT (then exits 0) and, as PID 1 of a shared PID namespace,
 * reaps every child that is re-parented to it. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig) {
  (void)sig;
  stop = 1;
}

static void on_child(int sig) { (void)sig; }

int main(int argc, char** argv) {
  if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
    puts("kubetrain-test pause 1.0");
    return 0;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_stop;
  if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
    perror("pause: sigaction");
    return 1;
  }
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGCHLD, &sa, NULL) != 0) {
    perror("pause: sigaction");
    return 2;
  }
  if (getpid() != 1) fputs("pause: warning: not running as PID 1\n", stderr);
  /* The signals stay blocked except inside sigsuspend, so none is lost between
   * the check of `stop` and the wait. */
  sigset_t block, wait_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGCHLD);
  sigprocmask(SIG_BLOCK, &block, &wait_mask);
  sigdelset(&wait_mask, SIGTERM);
  sigdelset(&wait_mask, SIGINT);
  sigdelset(&wait_mask, SIGCHLD);
  while (!stop) {
    sigsuspend(&wait_mask);
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
  }
  return 0;
}
