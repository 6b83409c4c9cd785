#include "server/openai_api.h"

#include <gtest/gtest.h>

namespace g4 {
namespace {

ApiLimits Limits() {
  ApiLimits l;
  l.vocab = 1000;
  l.defaults.do_sample = true;
  l.defaults.temperature = 1.0;
  l.defaults.top_k = 64;
  l.defaults.top_p = 0.95;
  l.suppress_tokens = {998, 999};
  return l;
}

// Parses and expects an error naming `param`.
void ExpectError(ApiRoute route, const std::string& body, const std::string& param, int status = 400) {
  ApiRequest r;
  ApiError e;
  EXPECT_FALSE(ParseApiRequest(route, body, Limits(), &r, &e)) << body;
  EXPECT_EQ(e.status, status) << body;
  EXPECT_EQ(e.param, param) << body << " -> " << e.message;
  EXPECT_FALSE(e.message.empty());
  const auto j = e.ToJson();
  EXPECT_TRUE(j["error"].contains("message") && j["error"].contains("type") && j["error"].contains("param") &&
              j["error"].contains("code"));
}

TEST(OpenAiApi, ResponseFormatAndGrammarBecomeTheOutputGrammar) {
  const std::string m = R"("model":"m","messages":[{"role":"user","content":"hi"}])";
  ApiRequest r;
  ApiError e;
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kChat, "{" + m + R"(,"response_format":{"type":"text"}})", Limits(), &r, &e));
  EXPECT_TRUE(r.output_grammar.empty());
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kChat, "{" + m + R"(,"response_format":{"type":"json_object"}})", Limits(), &r, &e));
  EXPECT_NE(r.output_grammar.find("root ::= object"), std::string::npos);
  // Properties keep the request's order (z before a), though the body's parse sorts keys.
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kCompletion, R"({"prompt":"p","response_format":{"type":"json_schema",
      "json_schema":{"name":"n","strict":true,"schema":{"type":"object","properties":{"z":{"type":"string"},
      "a":{"type":"integer"}},"required":["z","a"],"additionalProperties":false}}}})", Limits(), &r, &e)) << e.message;
  EXPECT_NE(r.output_grammar.find(R"("\"z\"" ":" string "," "\"a\"" ":" integer)"), std::string::npos) << r.output_grammar;
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kCompletion, R"({"prompt":"p","grammar":"root ::= [a-z]+\n"})", Limits(), &r, &e));
  EXPECT_EQ(r.output_grammar, "root ::= [a-z]+\n");
  EXPECT_FALSE(ParseApiRequest(ApiRoute::kChat, "{" + m + R"(,"response_format":{"type":"json_schema","json_schema":
      {"name":"n","schema":{"type":"object","properties":{"s":{"type":"string","pattern":"^a"}}}}}})", Limits(), &r, &e));
  EXPECT_EQ(e.param, "response_format");
  EXPECT_EQ(e.message, "'response_format' json_schema.schema #/properties/s: unsupported JSON-schema keyword 'pattern'");
  EXPECT_FALSE(ParseApiRequest(ApiRoute::kChat, "{" + m + R"(,"grammar":"root ::= x\n"})", Limits(), &r, &e));
  EXPECT_EQ(e.message, "'grammar': line 1, column 10: undefined rule 'x'");
}

TEST(OpenAiApi, StrictOrForcedToolsBecomeAToolCallGrammar) {
  const std::string m = R"("model":"m","messages":[{"role":"user","content":"hi"}])";
  const std::string tool = R"({"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"n":{"type":"integer"}},"required":["n"]}}})";
  const std::string strict_tool = R"({"type":"function","function":{"name":"g","strict":true,"parameters":{}}})";
  ApiRequest r;
  ApiError e;
  // Neither strict nor forced: free output (the repair pass reads the calls).
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kChat, "{" + m + ",\"tools\":[" + tool + "]}", Limits(), &r, &e)) << e.message;
  EXPECT_TRUE(r.output_grammar.empty());
  EXPECT_FALSE(r.tool_call_grammar);
  // Forced: the calls only, the arguments under the schema; one call without parallel_tool_calls.
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kChat, "{" + m + ",\"tools\":[" + tool + R"(],"tool_choice":"required",
      "parallel_tool_calls":false})", Limits(), &r, &e)) << e.message;
  EXPECT_TRUE(r.tool_call_grammar);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_NE(r.output_grammar.find("calls ::= call\n"), std::string::npos) << r.output_grammar;
  EXPECT_NE(r.output_grammar.find(R"("n" ":" integer)"), std::string::npos) << r.output_grammar;
  EXPECT_NE(r.output_grammar_in_thought.find(R"(root ::= "\xFD" tool-output)"), std::string::npos) << r.output_grammar_in_thought;
  // Strict under auto: text may come first, the call is optional.
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kChat, "{" + m + ",\"tools\":[" + tool + "," + strict_tool + "]}", Limits(), &r, &e)) << e.message;
  EXPECT_TRUE(r.tool_call_grammar);
  EXPECT_NE(r.output_grammar.find("tool-output ::= text calls?"), std::string::npos) << r.output_grammar;
  // Refused: a keyword the compiler does not take, a non-object schema, strict with response_format.
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f",
      "parameters":{"type":"object","properties":{"s":{"type":"string","pattern":"a"}}}}}]})", "tools");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"tools":[{"type":"function","function":{"name":"f","strict":true,
      "parameters":{"type":"array"}}}]})", "tools");
  ExpectError(ApiRoute::kChat, "{" + m + ",\"tools\":[" + strict_tool + R"(],"response_format":{"type":"json_object"}})",
              "response_format");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"tools":[{"type":"function","function":{"name":"f","strict":"yes"}}]})", "tools");
}

TEST(OpenAiApi, ChatFieldsAreRead) {
  ApiRequest r;
  ApiError e;
  const std::string body = R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]}],
    "max_completion_tokens":7,"temperature":0.5,"top_k":5,"top_p":0.9,"min_p":0.1,"seed":42,"stop":["a","b"],
    "presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,"logprobs":true,"top_logprobs":3,
    "stream":true,"stream_options":{"include_usage":true},"logit_bias":{"5":-100},
    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto",
    "chat_template_kwargs":{"enable_thinking":true},"n":1,"user":"u"})";
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kChat, body, Limits(), &r, &e)) << e.message;
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.max_tokens.value(), 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_TRUE(r.sampling.has_seed);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FLOAT_EQ(r.sampling.logit_bias.at(5), -100.0f);
  EXPECT_TRUE(r.tools_enabled);
  EXPECT_TRUE(r.enable_thinking);
  EXPECT_EQ(r.sampling.suppress_tokens, (std::vector<int>{998, 999}));
  EXPECT_EQ(r.messages.size(), 2u);
}

// What the chat template gets: the body in the client's key order, kwargs passed through,
// tools as the server decided, /generate as one user message.
TEST(OpenAiApi, TheTemplateSeesTheRequestAsSent) {
  ApiRequest r;
  ApiError e;
  const std::string body = R"({"messages":[{"role":"user","content":"hi","zeta":1,"alpha":2}],
    "tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}}],
    "tool_choice":{"type":"function","function":{"name":"g"}},
    "chat_template_kwargs":{"preserve_thinking":true,"custom":[1,"x"]},"reasoning_effort":"high",
    "add_generation_prompt":false})";
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kChat, body, Limits(), &r, &e)) << e.message;
  const ChatTemplateRequest& t = r.chat_template;
  EXPECT_EQ(t.messages.dump(), R"([{"role":"user","content":"hi","zeta":1,"alpha":2}])");
  EXPECT_EQ(t.tools.dump(), R"([{"type":"function","function":{"name":"g"}}])");
  EXPECT_EQ(t.kwargs.dump(), R"({"preserve_thinking":true,"custom":[1,"x"],"enable_thinking":true})");
  EXPECT_FALSE(t.add_generation_prompt);
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kChat, R"({"messages":[{"role":"user","content":"x"}],
    "tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"})", Limits(), &r, &e));
  EXPECT_TRUE(r.chat_template.tools.is_null());
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kGenerate, R"({"prompt":"p"})", Limits(), &r, &e));
  EXPECT_EQ(r.chat_template.messages.dump(), R"([{"role":"user","content":"p"}])");
  ExpectError(ApiRoute::kChat, R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":1}})",
              "chat_template_kwargs");
  ExpectError(ApiRoute::kChat, R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"messages":[]}})",
              "chat_template_kwargs");
  ExpectError(ApiRoute::kChat, R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":"yes"})",
              "add_generation_prompt");
}

TEST(OpenAiApi, DefaultsComeFromTheCheckpointAndGenerateIsGreedy) {
  ApiRequest r;
  ApiError e;
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kCompletion, R"({"prompt":"x"})", Limits(), &r, &e));
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 64);
  EXPECT_FALSE(r.max_tokens.has_value());
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kGenerate, R"({"prompt":"x","max_new_tokens":3})", Limits(), &r, &e));
  EXPECT_TRUE(r.sampling.greedy());
  EXPECT_EQ(r.max_tokens.value(), 3);
}

TEST(OpenAiApi, CompletionPromptForms) {
  ApiRequest r;
  ApiError e;
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kCompletion, R"({"prompt":[2,5,7],"logprobs":2})", Limits(), &r, &e));
  EXPECT_TRUE(r.has_prompt_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int>{2, 5, 7}));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kCompletion, R"({"prompt":[[2,5]]})", Limits(), &r, &e));
  EXPECT_EQ(r.prompt_ids.size(), 2u);
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kCompletion, R"({"prompt":["text"]})", Limits(), &r, &e));
  EXPECT_EQ(r.prompt_text, "text");
  // Huge max_tokens is not an error: it is capped to the room left later.
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kCompletion, R"({"prompt":"x","max_tokens":99999999999999})", Limits(), &r, &e));
  EXPECT_GT(r.max_tokens.value(), 1000000);
}

TEST(OpenAiApi, BadRequestsNameTheField) {
  ExpectError(ApiRoute::kChat, "{not json", "");
  ExpectError(ApiRoute::kChat, "[1,2]", "");
  ExpectError(ApiRoute::kChat, "", "");
  ExpectError(ApiRoute::kChat, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", "");  // bad UTF-8
  ExpectError(ApiRoute::kChat, R"({"max_tokens":5})", "messages");
  ExpectError(ApiRoute::kChat, R"({"messages":[]})", "messages");
  ExpectError(ApiRoute::kChat, R"({"messages":"hi"})", "messages");
  ExpectError(ApiRoute::kChat, R"({"messages":[{"role":"wizard","content":"x"}]})", "messages");
  ExpectError(ApiRoute::kChat, R"({"messages":[{"role":"user"}]})", "messages");
  ExpectError(ApiRoute::kChat, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", "messages");
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"n":2})", "n");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"temperature":"hot"})", "temperature");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"temperature":-1})", "temperature");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"temperature":1e300})", "temperature");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"top_p":1.5})", "top_p");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"top_k":-3})", "top_k");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"top_k":2.5})", "top_k");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"max_tokens":-1})", "max_tokens");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"max_tokens":0})", "max_tokens");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"max_tokens":"10"})", "max_tokens");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"seed":1.5})", "seed");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"stop":[1]})", "stop");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"stop":""})", "stop");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"stream":"yes"})", "stream");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"stream_options":{"include_usage":true}})", "stream_options");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"top_logprobs":3})", "top_logprobs");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"logprobs":true,"top_logprobs":50})", "top_logprobs");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"presence_penalty":3})", "presence_penalty");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"repetition_penalty":0})", "repetition_penalty");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"logit_bias":{"abc":1}})", "logit_bias");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"logit_bias":{"5000":1}})", "logit_bias");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"response_format":{"type":"xml"}})", "response_format");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}}})",
              "response_format");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"grammar":"root ::= \"a"})", "grammar");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"grammar":"root ::= \"a\"","response_format":{"type":"json_object"}})",
              "response_format");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"tool_choice":"required"})", "tool_choice");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"tools":[{"type":"function"}]})", "tools");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"functions":[]})", "functions");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"frobnicate":1})", "frobnicate");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"prompt":"x"})", "prompt");
  ExpectError(ApiRoute::kCompletion, R"({"prompt":""})", "prompt");
  ExpectError(ApiRoute::kCompletion, R"({"prompt":["a","b"]})", "prompt");
  ExpectError(ApiRoute::kCompletion, R"({"prompt":[1,-2]})", "prompt");
  ExpectError(ApiRoute::kCompletion, R"({"prompt":[1,5000]})", "prompt");
  ExpectError(ApiRoute::kCompletion, R"({"prompt":12})", "prompt");
  ExpectError(ApiRoute::kCompletion, R"({"prompt":"x","echo":true})", "echo");
  ExpectError(ApiRoute::kCompletion, R"({"prompt":"x","best_of":3})", "best_of");
  ExpectError(ApiRoute::kCompletion, R"({"prompt":"x","messages":[]})", "messages");
  ExpectError(ApiRoute::kGenerate, R"({"prompt":"x","stream":true})", "stream");
  ExpectError(ApiRoute::kGenerate, R"({"prompt":"x","timeout":-5})", "timeout");
}

TEST(OpenAiApi, TokenizeBodies) {
  TokenizeRequest t;
  ApiError e;
  ASSERT_TRUE(ParseTokenizeRequest(R"({"content":"hi","with_pieces":true})", &t, &e));
  EXPECT_EQ(t.content, "hi");
  EXPECT_TRUE(t.with_pieces);
  EXPECT_FALSE(ParseTokenizeRequest(R"({"content":5})", &t, &e));
  EXPECT_EQ(e.param, "content");
  std::vector<int> ids;
  ASSERT_TRUE(ParseDetokenizeRequest(R"({"tokens":[1,2,3]})", 10, &ids, &e));
  EXPECT_EQ(ids, (std::vector<int>{1, 2, 3}));
  ids.clear();
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens":[1,20]})", 10, &ids, &e));
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens":"1"})", 10, &ids, &e));
}

TEST(OpenAiApi, ToolChoiceRequiredAndNamed) {
  const std::string base = R"("messages":[{"role":"user","content":"hi"}],"tools":[
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}},
    {"type":"function","function":{"name":"get_time"}}])";
  ApiRequest r;
  ApiError e;
  ASSERT_TRUE(ParseApiRequest(ApiRoute::kChat, "{" + base + R"(,"tool_choice":"required"})",
                              Limits(), &r, &e))
      << e.message;
  EXPECT_TRUE(r.tool_call_forced);
  EXPECT_TRUE(r.tools_enabled);
  EXPECT_EQ(r.tools.size(), 2u);  // required: the model picks among all of them

  ASSERT_TRUE(ParseApiRequest(
      ApiRoute::kChat,
      "{" + base + R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}}})",
      Limits(), &r, &e))
      << e.message;
  EXPECT_TRUE(r.tool_call_forced);
  ASSERT_EQ(r.tools.size(), 1u);  // named: only that tool is rendered
  EXPECT_EQ(r.tools[0]["function"]["name"], "get_time");

  ASSERT_TRUE(
      ParseApiRequest(ApiRoute::kChat, "{" + base + R"(,"tool_choice":"auto"})", Limits(), &r, &e));
  EXPECT_FALSE(r.tool_call_forced);
  ASSERT_TRUE(
      ParseApiRequest(ApiRoute::kChat, "{" + base + R"(,"tool_choice":"none"})", Limits(), &r, &e));
  EXPECT_FALSE(r.tool_call_forced);
  EXPECT_FALSE(r.tools_enabled);

  const std::string m = R"("messages":[{"role":"user","content":"hi"}])";
  ExpectError(ApiRoute::kChat,
              "{" + base + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}}})",
              "tool_choice");
  ExpectError(ApiRoute::kChat, "{" + base + R"(,"tool_choice":{"type":"function"}})",
              "tool_choice");
  ExpectError(ApiRoute::kChat,
              "{" + base + R"(,"tool_choice":{"type":"custom","function":{"name":"get_time"}}})",
              "tool_choice");
  ExpectError(ApiRoute::kChat, "{" + base + R"(,"tool_choice":"any"})", "tool_choice");
  ExpectError(ApiRoute::kChat, "{" + base + R"(,"tool_choice":3})", "tool_choice");
  ExpectError(ApiRoute::kChat, "{" + m + R"(,"tools":[],"tool_choice":"required"})", "tool_choice");
  ExpectError(ApiRoute::kChat,
              "{" + m + R"(,"tool_choice":{"type":"function","function":{"name":"f"}}})",
              "tool_choice");
}

}  // namespace
}  // namespace g4
