/* nemesis_delay (C-style C++): a delayed link for the partition fault suite, without tc
 * netem (this kernel has none). An iptables NFQUEUE rule (installed by
 * tests/nemesis/netlab.py in the same network namespace) hands packets to
 * this process, which holds each one for --delay-ms and then accepts it.
 * Packets keep their order (one constant delay, FIFO). Only metadata is
 * copied to user space (NFQNL_COPY_META), verdicts carry no payload.
 *
 *   nemesis_delay --queue N --delay-ms D
 *
 * Prints "ready" on stdout once bound to the queue. Runs until SIGTERM/SIGINT;
 * packets still held then are accepted at once. If the queue overflows (the
 * kernel queue holds up to 65536 packets), the kernel drops packets: the
 * rule uses --queue-bypass, so with no process bound packets pass unchanged.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* FIFO ring of (packet id, release time). */
struct held {
  uint32_t id;
  int64_t due;
};
static struct held* ring;
static size_t ring_cap = 1 << 17, ring_head = 0, ring_len = 0;
static int64_t delay_ns;
static uint64_t total, dropped_full;

static int on_packet(struct nfq_q_handle* qh, struct nfgenmsg* msg, struct nfq_data* nfa,
                     void* data) {
  (void)msg;
  (void)data;
  struct nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph == NULL) return 0;
  uint32_t id = ntohl(ph->packet_id);
  total++;
  if (ring_len == ring_cap) {
    /* Cannot hold more: let it through now rather than lose it. */
    dropped_full++;
    nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
    return 0;
  }
  ring[(ring_head + ring_len) % ring_cap] = held{id, now_ns() + delay_ns};
  ring_len++;
  return 0;
}

static void release_due(struct nfq_q_handle* qh, int all) {
  int64_t now = now_ns();
  while (ring_len > 0 && (all || ring[ring_head].due <= now)) {
    nfq_set_verdict(qh, ring[ring_head].id, NF_ACCEPT, 0, NULL);
    ring_head = (ring_head + 1) % ring_cap;
    ring_len--;
  }
}

int main(int argc, char** argv) {
  int queue = -1;
  long delay_ms = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--queue") == 0) queue = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--delay-ms") == 0) delay_ms = atol(argv[i + 1]);
  }
  if (queue < 0 || queue > 65535 || delay_ms < 0) {
    fprintf(stderr, "usage: nemesis_delay --queue N --delay-ms D\n");
    return 2;
  }
  delay_ns = (int64_t)delay_ms * 1000000LL;
  ring = static_cast<held*>(calloc(ring_cap, sizeof(*ring)));
  if (ring == NULL) return 1;

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  struct nfq_handle* h = nfq_open();
  if (h == NULL) {
    perror("nfq_open");
    return 1;
  }
  if (nfq_bind_pf(h, AF_INET) < 0) {
    /* Not fatal on recent kernels (binding is a no-op there). */
  }
  struct nfq_q_handle* qh = nfq_create_queue(h, (uint16_t)queue, &on_packet, NULL);
  if (qh == NULL) {
    perror("nfq_create_queue");
    return 1;
  }
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) {
    perror("nfq_set_mode");
    return 1;
  }
  nfq_set_queue_maxlen(qh, 65536);
  int fd = nfq_fd(h);
  int rcvbuf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
  printf("ready\n");
  fflush(stdout);

  char buf[65536] __attribute__((aligned));
  while (!g_stop) {
    int timeout_ms = 1000;
    if (ring_len > 0) {
      int64_t wait = ring[ring_head].due - now_ns();
      timeout_ms = wait <= 0 ? 0 : (int)((wait + 999999) / 1000000);
    }
    struct pollfd p = {fd, POLLIN, 0};
    int n = poll(&p, 1, timeout_ms);
    if (n < 0 && errno != EINTR) break;
    if (n > 0 && (p.revents & POLLIN)) {
      for (;;) {
        ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r < 0) {
          if (errno == ENOBUFS) continue; /* the kernel dropped some: go on */
          break;
        }
        nfq_handle_packet(h, buf, (int)r);
      }
    }
    release_due(qh, 0);
  }
  release_due(qh, 1);
  fprintf(stderr, "nemesis_delay: queue %d: %llu packets delayed, %llu passed undelayed (ring full)\n",
          queue, (unsigned long long)total, (unsigned long long)dropped_full);
  nfq_destroy_queue(qh);
  nfq_close(h);
  return 0;
}
