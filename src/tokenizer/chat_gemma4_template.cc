// Which chat_template.jinja a checkpoint ships: known revisions and their rendering switches
// (chat_gemma4.h).
#include <string>
#include <string_view>

#include "tokenizer/chat_gemma4.h"

namespace g4 {

// ---------------------------------------------------------------------------------------------
// Template detection. The features, as they appear in the .jinja source text:
//   gemma4            "<|turn>" (Gemma-3 templates have "<start_of_turn>" instead)
//   think_newline     '<|think|>\n'  vs  '<|think|>'
//   empty_thought     '<|channel>thought\n<channel|>' (the generation prompt's empty channel)
//   replay_reasoning  "reasoning_content"
//   continue_turn     "prev_message_type == 'tool_response' and message['tool_calls']"
//   tool_role_guards  "!= 'tool'" (a newer revision; its other rules are not pinned here)

ChatTemplateInfo DetectChatTemplate(const std::string& jinja) {
  ChatTemplateInfo info;
  auto has = [&](std::string_view s) { return jinja.find(s) != std::string::npos; };
  if (!has("<|turn>")) {
    if (has("<start_of_turn>")) {
      info.revision = "gemma3";
      info.features_found = "<start_of_turn>/<end_of_turn> turns";
      info.warning =
          "chat_template.jinja is a Gemma-3 template (<start_of_turn>); this is not a "
          "Gemma-4 prompt format. g4 renders the Gemma-4 format instead.";
    } else {
      info.revision = "unknown";
      info.warning =
          "chat_template.jinja has no <|turn> marker: not a Gemma-4 template. g4 renders "
          "its built-in Gemma-4 format instead.";
    }
    return info;
  }
  Gemma4TemplateFeatures& f = info.features;
  f.think_newline = has("'<|think|>\\n'") || has("\"<|think|>\\n\"");
  bool think_plain = has("'<|think|>'") || has("\"<|think|>\"");
  f.empty_thought_in_prompt = has("<|channel>thought\\n<channel|>");
  f.replay_tool_reasoning = has("reasoning_content");
  f.continue_after_tool_response =
      has("prev_message_type == 'tool_response' and message['tool_calls']");
  bool tool_guards = has("!= 'tool'") || has("!= \"tool\"");
  info.features_found = Str(
      "think marker ",
      f.think_newline ? "\"<|think|>\\n\""
      : think_plain   ? "\"<|think|>\""
                      : "absent",
      "; empty thought channel in generation prompt: ", f.empty_thought_in_prompt ? "yes" : "no",
      "; reasoning replay for tool calls: ", f.replay_tool_reasoning ? "yes" : "no",
      "; turn continues after tool responses: ", f.continue_after_tool_response ? "yes" : "no",
      "; role != 'tool' guards: ", tool_guards ? "yes" : "no");
  struct Known {
    const char* name;
    bool think_newline, empty_thought, replay, continue_turn;
  };
  // llama.cpp models/templates/gemma4.jinja (E2B/E4B release), the same without the empty thought
  // channel (some E2B revisions), and google-gemma-4-31B-it-interleaved.jinja.
  static const Known kKnown[] = {
      {"gemma4-base", false, true, false, false},
      {"gemma4-no-empty-thought", false, false, false, false},
      {"gemma4-interleaved", true, true, true, true},
  };
  if ((think_plain || f.think_newline) && !tool_guards) {
    for (const Known& k : kKnown) {
      if (k.think_newline == f.think_newline && k.empty_thought == f.empty_thought_in_prompt &&
          k.replay == f.replay_tool_reasoning &&
          k.continue_turn == f.continue_after_tool_response) {
        info.revision = k.name;
        info.known = true;
        return info;
      }
    }
  }
  info.revision = "unknown";
  info.warning = Str(
      "chat_template.jinja is a Gemma-4 template but not a known revision (", info.features_found,
      tool_guards ? "; looks like the newer revision with tool-role guards" : "",
      "). g4 renders with the features it detected; check the prompt with `g4 inspect`.");
  return info;
}

}  // namespace g4
