// What the Gemma-4 chat files share: the protocol's text markers and Python's str.strip (the
// template strips with it, and so does the output parser where the template would).
#pragma once

#include <string_view>

namespace g4::gemma4_chat {

inline constexpr std::string_view kQuote = "<|\"|>";  // Gemma's string delimiter in tool syntax
inline constexpr std::string_view kChannelOpen = "<|channel>";
inline constexpr std::string_view kChannelClose = "<channel|>";
inline constexpr std::string_view kToolCallOpen = "<|tool_call>";
inline constexpr std::string_view kToolCallClose = "<tool_call|>";
inline constexpr std::string_view kThoughtHeader = "thought\n";
inline constexpr std::string_view kEndMarkers[] = {"<turn|>", "<eos>", "<|tool_response>"};

// str.strip(): Python's whitespace is Unicode-wide (NBSP, U+3000, U+2028, ...).
std::string_view PyStrip(std::string_view s);

}  // namespace g4::gemma4_chat
