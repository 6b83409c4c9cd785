#include "testing/sequences.h"

#include <utility>

namespace g4 {

void SequenceRunner::Wire(SequenceRequest& request) {
  request.on_token = [out = outcome](const TokenInfo& t) {
    out->tokens.push_back(t.token);
    out->infos.push_back(t);
    return true;
  };
  request.on_done = [out = outcome, p = promise](const SequenceResult& r) {
    out->result = r;
    p->set_value(*out);
  };
}

SequenceRequest SequenceRunner::Request(std::vector<int> prompt, int max_new) {
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new;
  Wire(r);
  return r;
}

}  // namespace g4
