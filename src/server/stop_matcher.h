// Stop strings matched on the generated text as it streams, across token boundaries: text that
// could still be the start of a stop string is held back until it cannot, and a match ends the
// output right before the stop string (which is trimmed, as OpenAI does).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace g4 {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends generated text; returns what is safe to show now. After a match, stopped() is true
  // and the stop string and everything after it are dropped.
  std::string Push(std::string_view text);
  // End of generation: the held-back tail (empty after a match).
  std::string Flush();
  bool stopped() const { return stopped_; }
  // Bytes held back right now.
  size_t pending() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace g4
