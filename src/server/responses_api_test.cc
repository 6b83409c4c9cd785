#include "server/responses_api.h"

#include <gtest/gtest.h>

#include "server/responses_store.h"

namespace g4 {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

ApiLimits Limits() {
  ApiLimits l;
  l.vocab = 1000;
  return l;
}

ResponsesRequest Parse(const std::string& body, const ResponsesLookup& lookup = nullptr) {
  ResponsesRequest r;
  ApiError e;
  EXPECT_TRUE(ParseResponsesRequest(body, Limits(), lookup, &r, &e)) << body << " -> " << e.message;
  return r;
}

ApiError ParseError(const std::string& body, const std::string& param,
                    const ResponsesLookup& lookup = nullptr) {
  ResponsesRequest r;
  ApiError e;
  EXPECT_FALSE(ParseResponsesRequest(body, Limits(), lookup, &r, &e)) << body;
  EXPECT_EQ(e.status, 400) << body;
  EXPECT_EQ(e.param, param) << body << " -> " << e.message;
  EXPECT_FALSE(e.message.empty());
  return e;
}

TEST(ResponsesApi, StringInputAndInstructionsBecomeSystemAndUserMessages) {
  const ResponsesRequest r = Parse(
      R"({"model":"m","input":"hi","instructions":"be brief","max_output_tokens":7,"temperature":0.5,"top_p":0.9,"stream":true})");
  EXPECT_EQ(r.api.route, ApiRoute::kChat);
  EXPECT_EQ(r.api.chat_template.messages,
            ordered_json::parse(
                R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])"));
  // The stored conversation leaves the instructions out (OpenAI does not carry them over).
  EXPECT_EQ(r.conversation, ordered_json::parse(R"([{"role":"user","content":"hi"}])"));
  EXPECT_EQ(*r.api.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.api.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.api.sampling.top_p, 0.9f);
  EXPECT_TRUE(r.api.stream);
  EXPECT_TRUE(r.store);
  EXPECT_FALSE(r.api.enable_thinking);
  EXPECT_EQ(r.instructions, "be brief");
  EXPECT_EQ(r.max_output_tokens, 7);
}

// OpenAI clients send optional fields as null; null means "not given", never a crash.
TEST(ResponsesApi, NullOptionalFieldsMeanTheDefaults) {
  const ResponsesRequest r = Parse(
      R"({"model":"m","input":"hi","stream":null,"store":null,"parallel_tool_calls":null,"max_output_tokens":null,"temperature":null})");
  EXPECT_FALSE(r.api.stream);
  EXPECT_TRUE(r.store);
  ParseError(R"({"input":"x","stream":null,"stream_options":{"include_obfuscation":false}})",
             "stream_options");
}

TEST(ResponsesApi, ItemsFoldIntoChatMessages) {
  const ResponsesRequest r = Parse(R"({"input":[
      {"role":"developer","content":"dev"},
      {"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
      {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"think"}]},
      {"type":"message","role":"assistant","id":"msg_1","status":"completed",
       "content":[{"type":"output_text","text":"let me look","annotations":[]}]},
      {"type":"function_call","id":"fc_1","call_id":"c1","name":"get","arguments":"{\"x\":1}","status":"completed"},
      {"type":"function_call","call_id":"c2","name":"put","arguments":"{}"},
      {"type":"function_call_output","call_id":"c1","output":"one"},
      {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"}]}],
    "store":false})");
  const ordered_json want = ordered_json::parse(R"([
      {"role":"developer","content":"dev"},
      {"role":"user","content":"ab"},
      {"role":"assistant","content":"let me look","reasoning_content":"think","tool_calls":[
        {"id":"c1","type":"function","function":{"name":"get","arguments":"{\"x\":1}"}},
        {"id":"c2","type":"function","function":{"name":"put","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"one","name":"get"},
      {"role":"tool","tool_call_id":"c2","content":"two","name":"put"}])");
  EXPECT_EQ(r.api.chat_template.messages, want);
  EXPECT_FALSE(r.store);
}

TEST(ResponsesApi, FlatFunctionToolsAndToolChoiceBecomeChatTools) {
  const ResponsesRequest r = Parse(R"({"input":"x","tools":[
      {"type":"function","name":"f","description":"F","parameters":{"type":"object"},"strict":true},
      {"type":"function","name":"g"}],"tool_choice":{"type":"function","name":"g"}})");
  EXPECT_TRUE(r.api.tool_call_forced);
  ASSERT_EQ(r.api.tools.size(), 1u);  // a named choice renders only that tool
  EXPECT_EQ(r.api.tools[0]["function"]["name"], "g");
  EXPECT_EQ(r.tools.size(), 2u);  // echoed as sent
  const ResponsesRequest all = Parse(R"({"input":"x","tools":[
      {"type":"function","name":"f","description":"F","parameters":{"type":"object"}}],"tool_choice":"required"})");
  EXPECT_TRUE(all.api.tool_call_forced);
  EXPECT_EQ(
      all.api.chat_template.tools,
      ordered_json::parse(
          R"([{"type":"function","function":{"name":"f","description":"F","parameters":{"type":"object"}}}])"));
  EXPECT_FALSE(
      Parse(R"({"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"none"})")
          .api.tools_enabled);
}

TEST(ResponsesApi, ReasoningEffortTurnsThinkingOn) {
  EXPECT_TRUE(
      Parse(R"({"input":"x","reasoning":{"effort":"high","summary":"auto"}})").api.enable_thinking);
  EXPECT_TRUE(Parse(R"({"input":"x","reasoning":{}})").api.enable_thinking);
  EXPECT_FALSE(Parse(R"({"input":"x","reasoning":{"effort":"none"}})").api.enable_thinking);
  EXPECT_EQ(Parse(R"({"input":"x","reasoning":{"effort":"low"}})")
                .api.chat_template.kwargs["enable_thinking"],
            true);
  ParseError(R"({"input":"x","reasoning":{"effort":"huge"}})", "reasoning.effort");
}

TEST(ResponsesApi, PreviousResponseIdContinuesTheStoredConversation) {
  const ordered_json stored = ordered_json::parse(
      R"([{"role":"user","content":"q1"},{"role":"assistant","content":"a1"}])");
  ResponsesLookup lookup = [&](const std::string& id) -> std::optional<ordered_json> {
    if (id == "resp_1") return stored;
    return std::nullopt;
  };
  const ResponsesRequest r =
      Parse(R"({"input":"q2","previous_response_id":"resp_1","instructions":"new"})", lookup);
  EXPECT_EQ(
      r.api.chat_template.messages,
      ordered_json::parse(R"([{"role":"system","content":"new"},{"role":"user","content":"q1"},
                                    {"role":"assistant","content":"a1"},{"role":"user","content":"q2"}])"));
  EXPECT_EQ(r.previous_response_id, "resp_1");
  const ApiError e = ParseError(R"({"input":"q2","previous_response_id":"resp_2"})",
                                "previous_response_id", lookup);
  EXPECT_EQ(e.code, "previous_response_not_found");
  // A tool output for a call of the previous response is named after it, as when sent whole.
  const ordered_json with_call =
      ordered_json::parse(R"([{"role":"user","content":"q1"},{"role":"assistant","content":"",
      "tool_calls":[{"id":"c9","type":"function","function":{"name":"get","arguments":"{}"}}]}])");
  const ResponsesRequest chained =
      Parse(R"({"input":[{"type":"function_call_output","call_id":"c9","output":"r"}],
      "previous_response_id":"resp_9"})",
            [&](const std::string&) { return std::optional<ordered_json>(with_call); });
  EXPECT_EQ(
      chained.api.chat_template.messages.back(),
      ordered_json::parse(R"({"role":"tool","tool_call_id":"c9","content":"r","name":"get"})"));
  // Without input, the previous conversation alone is the prompt.
  EXPECT_EQ(Parse(R"({"previous_response_id":"resp_1"})", lookup).api.chat_template.messages.size(),
            2u);
}

TEST(ResponsesApi, TextFormatMapsOntoResponseFormatAndItsErrors) {
  // json_schema goes where chat's response_format goes, and gets exactly chat's answer.
  ApiRequest chat;
  ApiError chat_error;
  const bool chat_ok = ParseApiRequest(
      ApiRoute::kChat,
      R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"}}}})",
      Limits(), &chat, &chat_error);
  ResponsesRequest r;
  ApiError e;
  const bool ok = ParseResponsesRequest(
      R"({"input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"},"strict":true}}})",
      Limits(), nullptr, &r, &e);
  EXPECT_EQ(ok, chat_ok);
  if (!ok) {
    EXPECT_EQ(e.message, chat_error.message);
    EXPECT_EQ(e.param, "text.format");
  }
  Parse(R"({"input":"x","text":{"format":{"type":"text"},"verbosity":"low"}})");
  ParseError(R"({"input":"x","text":{"format":{"type":"json_schema","schema":{}}}})",
             "text.format");
  ParseError(R"({"input":"x","text":{"format":{"type":"yaml"}}})", "text.format");
  ParseError(R"({"input":"x","text":{"colour":"red"}})", "text");
}

TEST(ResponsesApi, MalformedInputIsA400NamingTheField) {
  ParseError("", "");
  ParseError("[1]", "");
  ParseError(R"({"input":"x","frobnicate":1})", "frobnicate");
  ParseError(R"({"model":"m"})", "input");
  ParseError(R"({"input":""})", "input");
  ParseError(R"({"input":5})", "input");
  ParseError(R"({"input":[]})", "input");
  ParseError(R"({"input":[7]})", "input");
  ParseError(R"({"input":[{"role":"tool","content":"x"}]})", "input");
  ParseError(R"({"input":[{"role":"user"}]})", "input");
  ParseError(R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]})",
             "input");
  ParseError(R"({"input":[{"type":"item_reference","id":"x"}]})", "input");
  ParseError(R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})", "input");
  ParseError(R"({"input":[{"type":"function_call","name":"f","call_id":"c","arguments":{}}]})",
             "input");
  ParseError(R"({"input":[{"type":"function_call_output","call_id":"c"}]})", "input");
  ParseError(R"({"input":[{"type":"reasoning","summary":[],"encrypted_content":"zz"}]})", "input");
  ParseError(R"({"input":"x","tools":[{"type":"web_search"}]})", "tools");
  ParseError(R"({"input":"x","tools":[{"type":"function","function":{"name":"f"}}]})", "tools");
  ParseError(R"({"input":"x","tool_choice":{"type":"file_search"}})", "tool_choice");
  ParseError(R"({"input":"x","tool_choice":"required"})", "tool_choice");
  EXPECT_EQ(ParseError(R"({"input":"x","max_output_tokens":0})", "max_output_tokens").message,
            "'max_output_tokens' must be at least 1, got 0");
  ParseError(R"({"input":"x","temperature":3})", "temperature");
  ParseError(R"({"input":"x","store":"yes"})", "store");
  ParseError(R"({"input":"x","background":true})", "background");
  ParseError(R"({"input":"x","include":["reasoning.encrypted_content"]})", "include");
  ParseError(R"({"input":"x","truncation":"auto"})", "truncation");
  ParseError(R"({"input":"x","conversation":"c"})", "conversation");
  ParseError(R"({"input":"x","instructions":5})", "instructions");
  ParseError(R"({"input":"x","stream_options":{"include_obfuscation":false}})", "stream_options");
  ParseError(R"({"input":"x","metadata":{"k":1}})", "metadata");
}

// The events of an SSE text: (type, data) in order.
std::vector<std::pair<std::string, json>> Events(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    const std::string block = sse.substr(at, end - at);
    const size_t nl = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u);
    EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0);
    out.emplace_back(block.substr(7, nl - 7), json::parse(block.substr(nl + 7)));
    at = end + 2;
  }
  return out;
}

SequenceResult Result(const std::string& finish, int prompt = 10, int completion = 5) {
  SequenceResult r;
  r.finish_reason = finish;
  r.prompt_tokens = prompt;
  r.cached_tokens = 2;
  r.completion_tokens = completion;
  return r;
}

TEST(ResponsesApi, WriterStreamsReasoningTextAndCallsInOrder) {
  ResponsesWriter w(Parse(R"({"input":"q","reasoning":{"effort":"low"}})"), "resp_ab-1", 123, "m");
  std::string sse = w.Start();
  sse += w.Add({"thin", ""});
  sse += w.Add({"king", ""});
  sse += w.Add({"", ""});
  sse += w.Add({"", "Hel"});
  sse += w.Add({"", "lo"});
  const json calls = json::parse(
      R"([{"id":"call_0","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}])");
  sse += w.Finish(Result("stop"), calls);
  const auto events = Events(sse);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    types.push_back(events[i].first);
    EXPECT_EQ(events[i].second["type"], events[i].first);
    EXPECT_EQ(events[i].second["sequence_number"], i);
  }
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.reasoning_summary_part.added",
                                         "response.reasoning_summary_text.delta",
                                         "response.reasoning_summary_text.delta",
                                         "response.reasoning_summary_text.done",
                                         "response.reasoning_summary_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(types, want);
  const json r = w.Response();
  EXPECT_EQ(events.back().second["response"], r);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["incomplete_details"], nullptr);
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(
      r["output"][0],
      json::parse(
          R"({"id":"rs_ab-1_0","type":"reasoning","summary":[{"type":"summary_text","text":"thinking"}]})"));
  EXPECT_EQ(r["output"][1]["id"], "msg_ab-1_1");
  EXPECT_EQ(r["output"][1]["status"], "completed");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Hello");
  EXPECT_EQ(r["output"][2]["type"], "function_call");
  EXPECT_EQ(r["output"][2]["name"], "f");
  EXPECT_EQ(r["output"][2]["arguments"], "{\"a\":1}");
  EXPECT_EQ(r["output"][2]["call_id"], "call_ab-1_2");
  EXPECT_EQ(r["usage"],
            json::parse(
                R"({"input_tokens":10,"input_tokens_details":{"cached_tokens":2},"output_tokens":5,
                                         "output_tokens_details":{"reasoning_tokens":2},"total_tokens":15})"));
  // Item events carry their item's id and index.
  for (const auto& [type, data] : events) {
    if (data.contains("item_id")) {
      EXPECT_EQ(data["item_id"], r["output"][data["output_index"].get<size_t>()]["id"]);
    }
  }
  // The conversation a previous_response_id continues: the request's, then this turn.
  EXPECT_EQ(w.Conversation(), ordered_json::parse(R"([{"role":"user","content":"q"},
      {"role":"assistant","content":"Hello","tool_calls":[{"id":"call_ab-1_2","type":"function",
       "function":{"name":"f","arguments":"{\"a\":1}"}}],"reasoning_content":"thinking"}])"));
}

TEST(ResponsesApi, WriterEndsIncompleteOrFailed) {
  ResponsesWriter cut(Parse(R"({"input":"q","max_output_tokens":2})"), "resp_x-1", 1, "m");
  std::string sse = cut.Start() + cut.Add({"", "a"}) + cut.Add({"", "b"});
  sse += cut.Finish(Result("length", 4, 2), json::array());
  auto events = Events(sse);
  EXPECT_EQ(events.back().first, "response.incomplete");
  const json r = cut.Response();
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["max_output_tokens"], 2);
  // Calls of a cut response: the last one may be cut itself, so it is not claimed complete.
  ResponsesWriter calls(Parse(R"({"input":"q","max_output_tokens":9})"), "resp_x-2", 1, "m");
  calls.Start();
  calls.Finish(Result("length", 4, 9), json::parse(R"([
      {"id":"call_0","type":"function","function":{"name":"f","arguments":"{}"}},
      {"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":"}}])"));
  EXPECT_EQ(calls.Response()["output"][0]["status"], "completed");
  EXPECT_EQ(calls.Response()["output"][1]["status"], "incomplete");
  ResponsesWriter echo(Parse(R"({"input":"q","temperature":0.7,"top_p":0.95})"), "resp_x-3", 1,
                       "m");
  EXPECT_EQ(echo.Response()["temperature"], 0.7);  // as sent, not the float's widening
  EXPECT_EQ(echo.Response()["top_p"], 0.95);

  SequenceResult failed = Result("error");
  failed.error = "boom";
  ResponsesWriter bad(Parse(R"({"input":"q"})"), "resp_x-2", 1, "m");
  events = Events(bad.Start() + bad.Finish(failed, json::array()));
  EXPECT_EQ(events.back().first, "response.failed");
  EXPECT_EQ(bad.Response()["status"], "failed");
  EXPECT_EQ(bad.Response()["error"]["code"], "server_error");
  EXPECT_TRUE(bad.Response()["output"].empty());
}

TEST(ResponsesApi, WriterAnswersAnEmptyMessageWhenTheModelSaidNothing) {
  ResponsesWriter w(Parse(R"({"input":"q"})"), "resp_e-1", 1, "m");
  const auto events = Events(w.Start() + w.Finish(Result("stop", 3, 1), json::array()));
  EXPECT_EQ(events.back().first, "response.completed");
  const json r = w.Response();
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "");
}

TEST(ResponseStore, EvictsTheLeastRecentlyUsedByCount) {
  ResponseStore store(2);
  store.Put("a", {json{{"id", "a"}}, ordered_json::array()});
  store.Put("b", {json{{"id", "b"}}, ordered_json::array()});
  ASSERT_TRUE(store.Get("a"));  // a is now the most recent
  store.Put("c", {json{{"id", "c"}}, ordered_json::array()});
  EXPECT_EQ(store.size(), 2u);
  EXPECT_FALSE(store.Get("b"));
  EXPECT_EQ(store.Get("a")->response["id"], "a");
  EXPECT_TRUE(store.Erase("a"));
  EXPECT_FALSE(store.Erase("a"));
  EXPECT_FALSE(store.Get("a"));
  store.set_capacity(0);
  EXPECT_EQ(store.size(), 0u);
}

}  // namespace
}  // namespace g4
