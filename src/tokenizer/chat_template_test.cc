// The chat-template component: where the template comes from, what the template sees, and a
// differential test of whole chat-completions requests against Python Jinja2 set up as
// transformers + vLLM render them (tools/jinja_diff.py --emit-requests).
#include "tokenizer/chat_template.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "tokenizer/chat_gemma4.h"

namespace g4 {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// A model directory holding only the given small files.
std::string ModelDir(const std::string& name, const std::map<std::string, std::string>& files) {
  const fs::path dir = fs::path(testing::TempDir()) / ("g4_chat_template_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [file, text] : files) std::ofstream(dir / file, std::ios::binary) << text;
  return dir.string();
}

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(G4_SOURCE_DIR) + "/" + relative, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ChatTemplateRequest Body(const std::string& json) {
  auto request = ChatTemplateRequestFromBody(ordered_json::parse(json));
  EXPECT_TRUE(request.ok()) << request.status().message();
  return request.ok() ? *request : ChatTemplateRequest{};
}

std::string Render(const std::string& dir, const std::string& body) {
  auto t = ChatTemplate::Load(dir);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return "";
  auto text = t->Render(Body(body));
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? *text : "";
}

const char kEcho[] =
    "{{ bos_token }}|{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}|{{ eos_token }}|"
    "{{ add_generation_prompt }}";

TEST(ChatTemplate, PrefersTheCheckpointFile) {
  const std::string dir = ModelDir("file", {{"chat_template.jinja", kEcho},
                                            {"tokenizer_config.json", R"({"chat_template": "config", "bos_token": "<s>",
                                              "eos_token": {"content": "</s>", "lstrip": false}})"}});
  auto t = ChatTemplate::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->source(), ChatTemplateSource::kFile);
  // Special tokens come from tokenizer_config, in both its string and AddedToken forms.
  EXPECT_EQ(Render(dir, R"({"messages": [{"role": "user", "content": "hi"}]})"), "<s>|user:hi;|</s>|True");
}

TEST(ChatTemplate, FallsBackToTokenizerConfigStringAndNamedList) {
  const std::string as_string = ModelDir("config_string", {{"tokenizer_config.json", ordered_json{{"chat_template", kEcho}}.dump()}});
  EXPECT_EQ(ChatTemplate::Load(as_string)->source(), ChatTemplateSource::kTokenizerConfig);
  EXPECT_EQ(Render(as_string, R"({"messages": [{"role": "user", "content": "a"}], "add_generation_prompt": false})"),
            "<bos>|user:a;|<eos>|False");
  const ordered_json list = {{"chat_template", {{{"name", "tool_use"}, {"template", "TOOLS"}},
                                                {{"name", "default"}, {"template", "DEFAULT"}}}}};
  const std::string as_list = ModelDir("config_list", {{"tokenizer_config.json", list.dump()}});
  EXPECT_EQ(Render(as_list, R"({"messages": []})"), "DEFAULT");
  const ordered_json no_default = {{"chat_template", {{{"name", "tool_use"}, {"template", "TOOLS"}}}}};
  auto missing = ChatTemplate::Load(ModelDir("config_no_default", {{"tokenizer_config.json", no_default.dump()}}));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("default"), std::string::npos);
}

TEST(ChatTemplate, WithoutATemplateRendersTheBuiltInFormat) {
  const std::string dir = ModelDir("none", {});
  auto t = ChatTemplate::Load(dir);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->source(), ChatTemplateSource::kBuiltIn);
  const char body[] = R"({"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"enable_thinking": true}})";
  Gemma4ChatOptions options;
  options.enable_thinking = true;
  EXPECT_EQ(*t->Render(Body(body)),
            *RenderGemma4Chat(nlohmann::json::array({{{"role", "user"}, {"content", "Hi"}}}), nullptr, options));
  // The variant follows the model size: per-layer embeddings (E2B/E4B) mean the small one.
  const char plain[] = R"({"messages": [{"role": "user", "content": "Hi"}]})";
  EXPECT_EQ(t->version(), "built-in-large");
  EXPECT_EQ(*t->Render(Body(plain)), "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  auto small = ChatTemplate::Load(
      ModelDir("none_small", {{"config.json", R"({"text_config": {"hidden_size_per_layer_input": 256}})"}}));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->version(), "built-in-small");
  EXPECT_EQ(*small->Render(Body(plain)), "<bos><|turn>user\nHi<turn|>\n<|turn>model\n");
  auto large = ChatTemplate::Load(
      ModelDir("none_large", {{"config.json", R"({"text_config": {"hidden_size_per_layer_input": 0}})"}}));
  EXPECT_EQ(large->version(), "built-in-large");
}

TEST(ChatTemplate, ErrorsNameTheFileAndTheTemplatesMessage) {
  auto bad = ChatTemplate::Load(ModelDir("bad", {{"chat_template.jinja", "ok\n{% if x %}never closed"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("chat_template.jinja"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("line"), std::string::npos) << bad.status().message();
  const std::string dir =
      ModelDir("raises", {{"chat_template.jinja", "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}x"}});
  auto t = ChatTemplate::Load(dir);
  ASSERT_TRUE(t.ok());
  auto raised = t->Render(Body(R"({"messages": [{"role": "assistant", "content": "a"}]})"));
  ASSERT_FALSE(raised.ok());
  EXPECT_NE(raised.status().message().find("first must be user"), std::string::npos) << raised.status().message();
}

TEST(ChatTemplate, PassesTheRequestAsVllmDoes) {
  const std::string dir = ModelDir(
      "request", {{"chat_template.jinja",
                   "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments is mapping }}"
                   "{{ c.function.arguments }}{% endfor %}{% endfor %}|{{ tools | map(attribute='function.name') | list "
                   "if tools else tools }}|{{ enable_thinking }}|{{ preserve_thinking }}|{{ custom }}|{{ documents }}"}});
  // JSON-string arguments become objects (key order kept); text that is not JSON stays a string.
  EXPECT_EQ(Render(dir, R"({"messages": [{"role": "assistant", "tool_calls": [
      {"function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [true, null]}"}},
      {"function": {"name": "g", "arguments": "not json"}}]}],
      "chat_template_kwargs": {"enable_thinking": true, "preserve_thinking": false, "custom": "yes"}})"),
            "True{'b': 1, 'a': [True, None]}Falsenot json|None|True|False|yes|None");
  const char tools[] = R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}])";
  EXPECT_EQ(Render(dir, Str(R"({"messages": [], )", tools, "}")), "|['f', 'g']||||None");
  EXPECT_EQ(Render(dir, Str(R"({"messages": [], "tool_choice": "none", )", tools, "}")), "|None||||None");
  EXPECT_EQ(Render(dir, Str(R"({"messages": [], "tool_choice": {"type": "function", "function": {"name": "g"}}, )", tools, "}")),
            "|['g']||||None");
  EXPECT_EQ(Render(dir, R"({"messages": [], "reasoning_effort": "high"})"), "|None|True|||None");
  EXPECT_FALSE(ChatTemplateRequestFromBody(ordered_json::parse(R"({"messages": {}})")).ok());
  EXPECT_FALSE(ChatTemplateRequestFromBody(ordered_json::parse(R"({"messages": [], "chat_template_kwargs": 1})")).ok());
}

TEST(ChatTemplate, DetectsVersionsByContent) {
  EXPECT_EQ(DetectChatTemplateVersion("{{ '<start_of_turn>' }}"), "gemma3");
  EXPECT_EQ(DetectChatTemplateVersion(kEcho), "unknown/custom");
  // g4's own test templates are in the Gemma-4 format but no Google version.
  EXPECT_EQ(DetectChatTemplateVersion(ReadSource("tests/templates/gemma4_g4_small.jinja")), "unknown/custom");
  const std::string v1 = "format_function_declaration '<|turn>' '<|think|>'";
  EXPECT_EQ(DetectChatTemplateVersion(v1), "gemma4-v1-small");
  EXPECT_EQ(DetectChatTemplateVersion(v1 + " '<|channel>thought\\n<channel|>'"), "gemma4-v1-large");
  EXPECT_EQ(DetectChatTemplateVersion(v1 + " reasoning_content"), "gemma4-interleaved");
  EXPECT_EQ(DetectChatTemplateVersion("<|turn> {#- OpenAI Chat Completions: -#}"), "gemma4-v2-small");
  EXPECT_EQ(DetectChatTemplateVersion("<|turn> OpenAI Chat Completions filter_keys"), "gemma4-v3-small");
  EXPECT_EQ(DetectChatTemplateVersion("<|turn> Google Gemma 4 Canonical Chat Template preserve_thinking filter_keys "
                                      "'<|channel>thought\\n<channel|>'"),
            "gemma4-v4-large");
}

TEST(ChatTemplate, PromptOpeningAThoughtChannelStartsTheOutputAsReasoning) {
  EXPECT_TRUE(PromptOpensThought("<|turn>model\n<|channel>thought\n"));
  EXPECT_FALSE(PromptOpensThought("<|turn>model\n<|channel>thought\n<channel|>"));
  Gemma4OutputParser parser(false, /*in_thought=*/true);
  ChatOutput out = parser.Push("checking the result<channel|>It is 21 degrees.<turn|>");
  ChatOutput rest = parser.Finish();
  EXPECT_EQ(out.reasoning + rest.reasoning, "checking the result");
  EXPECT_EQ(out.content + rest.content, "It is 21 degrees.");
}

// Whole requests through the component against Python Jinja2. G4_JINJA_TEMPLATES=DIR adds
// templates (e.g. real Gemma-4 ones); G4_JINJA_CONVERSATIONS=N generates more requests.
TEST(ChatTemplateDiff, MatchesTransformersAndVllm) {
  const std::string cases_path = testing::TempDir() + "/g4_chat_template_cases.jsonl";
  std::string command = std::string("python3 ") + G4_SOURCE_DIR + "/tools/jinja_diff.py --emit-requests " + cases_path;
  if (const char* dir = std::getenv("G4_JINJA_TEMPLATES")) command += std::string(" --templates ") + dir;
  if (const char* n = std::getenv("G4_JINJA_CONVERSATIONS")) command += std::string(" --conversations ") + n;
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "python3 with jinja2 is not available";
  std::ifstream in(cases_path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const ordered_json tokenizer_config = ordered_json::parse(line)["tokenizer_config"];
  std::map<std::string, std::optional<ChatTemplate>> loaded;  // template file -> component
  std::map<std::string, std::pair<int, int>> per_template;    // (agreeing, total)
  int total = 0, agree = 0;
  while (std::getline(in, line)) {
    const auto c = ordered_json::parse(line);
    const std::string file = c["template_file"], name = c["name"];
    if (!loaded.count(file)) {
      // Every other template goes through tokenizer_config.json instead of chat_template.jinja.
      ordered_json config = tokenizer_config;
      std::map<std::string, std::string> files;
      std::ifstream src(file, std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
      if (loaded.size() % 2 == 0) {
        files["chat_template.jinja"] = text;
      } else {
        config["chat_template"] = text;
      }
      files["tokenizer_config.json"] = config.dump();
      auto t = ChatTemplate::Load(ModelDir(Str("diff", loaded.size()), files));
      ASSERT_TRUE(t.ok()) << file << ": " << t.status().message();
      loaded[file].emplace(std::move(*t));
    }
    auto& counts = per_template[name.substr(0, name.find('#'))];
    ++total;
    ++counts.second;
    auto request = ChatTemplateRequestFromBody(c["body"]);
    Result<std::string> rendered = request.ok() ? loaded[file]->Render(*request) : Result<std::string>(request.status());
    if (c.contains("error")) {
      EXPECT_FALSE(rendered.ok()) << name << ": Jinja2 raised " << c["error"] << " but g4 rendered\n" << *rendered;
    } else if (!rendered.ok()) {
      ADD_FAILURE() << name << ": g4 failed: " << rendered.status().message();
      continue;
    } else if (*rendered != c["expected"].get<std::string>()) {
      ADD_FAILURE() << name << ": render differs\n--- Jinja2:\n" << c["expected"].get<std::string>() << "\n--- g4:\n" << *rendered;
      continue;
    }
    ++agree;
    ++counts.first;
  }
  for (const auto& [name, counts] : per_template) std::printf("  %-40s %d/%d\n", name.c_str(), counts.first, counts.second);
  std::printf("chat template diff: %d requests, %d agree with Jinja2 (identical render or both refuse)\n", total, agree);
  EXPECT_GT(total, 0);
}

}  // namespace
}  // namespace g4
