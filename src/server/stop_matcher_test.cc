#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace g4 {
namespace {

// Feeds pieces one by one and returns everything shown.
std::string Feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.Push(p);
  return out + m.Flush();
}

TEST(StopMatcher, MatchesAcrossTokenBoundariesAndTrims) {
  StopMatcher m({"END"});
  EXPECT_EQ(Feed(m, {"hello E", "N", "D and more"}), "hello ");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, HoldsBackOnlyWhatMayStartAStop) {
  StopMatcher m({"\n\nUser:"});
  EXPECT_EQ(m.Push("abc\n"), "abc");
  EXPECT_EQ(m.pending(), 1u);
  EXPECT_EQ(m.Push("x"), "\nx");  // not a stop after all: released
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Push("\n\nUs"), "");
  EXPECT_EQ(m.Flush(), "\n\nUs");  // generation ended without a match: nothing is lost
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(Feed(m, {"hel", "lo world"}), "hel");
}

TEST(StopMatcher, NoStopsPassesEverythingAndMultibyteStopsWork) {
  StopMatcher none({});
  EXPECT_EQ(none.Push("abc"), "abc");
  StopMatcher m({"世界"});
  EXPECT_EQ(Feed(m, {"你好", "世", "界!"}), "你好");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Push("more"), "");
}

}  // namespace
}  // namespace g4
