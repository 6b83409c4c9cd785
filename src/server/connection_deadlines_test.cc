#include "server/connection_deadlines.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

namespace g4 {
namespace {

using Clock = ConnectionDeadlines::Clock;
using std::chrono::milliseconds;

// True if the peer of `fd` shut the connection down (recv sees end of stream) within `wait`.
bool PeerShutDown(int fd, milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

TEST(ConnectionDeadlines, ShutsDownAConnectionPastItsDeadline) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::atomic<int> expired{0};
  std::string phase;
  {
    ConnectionDeadlines deadlines([&](const std::string& p) {
      phase = p;
      expired.fetch_add(1);
    });
    const auto id = deadlines.Add(sv[0]);
    const auto t0 = Clock::now();
    deadlines.Arm(id, t0 + milliseconds(150), "headers");
    EXPECT_FALSE(PeerShutDown(sv[1], milliseconds(50)));
    EXPECT_TRUE(PeerShutDown(sv[1], milliseconds(5000)));
    EXPECT_GE(Clock::now() - t0, milliseconds(150));
    EXPECT_TRUE(deadlines.Expired(id));
    for (int i = 0; i < 100 && expired.load() == 0; ++i)
      std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(expired.load(), 1);
    EXPECT_EQ(phase, "headers");
    // The owner's descriptor is still its own (only the socket was shut down); reads see EOF.
    char c;
    EXPECT_EQ(::recv(sv[0], &c, 1, MSG_DONTWAIT), 0);
    deadlines.Remove(id);
  }
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(ConnectionDeadlines, DisarmedOrRearmedConnectionsAreLeftAlone) {
  int a[2], b[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
  ConnectionDeadlines deadlines;
  const auto ida = deadlines.Add(a[0]), idb = deadlines.Add(b[0]);
  deadlines.Arm(ida, Clock::now() + milliseconds(100), "headers");
  deadlines.Disarm(ida);  // the request was read in time
  deadlines.Arm(idb, Clock::now() + milliseconds(100), "headers");
  deadlines.Arm(idb, Clock::now() + milliseconds(60000), "headers");  // the next request's window
  EXPECT_FALSE(PeerShutDown(a[1], milliseconds(400)));
  EXPECT_FALSE(PeerShutDown(b[1], milliseconds(10)));
  EXPECT_FALSE(deadlines.Expired(ida));
  EXPECT_FALSE(deadlines.Expired(idb));
  // Still usable in both directions.
  ASSERT_EQ(::send(a[1], "x", 1, 0), 1);
  char c = 0;
  EXPECT_EQ(::recv(a[0], &c, 1, 0), 1);
  // Removed while armed: closing our descriptor afterwards is safe and nothing fires later.
  deadlines.Arm(ida, Clock::now() + milliseconds(50), "body");
  deadlines.Remove(ida);
  EXPECT_FALSE(PeerShutDown(a[1], milliseconds(200)));
  for (int fd : {a[0], a[1], b[0], b[1]}) ::close(fd);
}

}  // namespace
}  // namespace g4
