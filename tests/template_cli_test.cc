// `g4 template` and the chat-template lines of `g4 inspect`, as users run them: the exact prompt
// bytes (no newline of its own), the request from a file or stdin, errors as a non-zero exit
// with the message, and the template's source and version named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "testing/checkpoints.h"
#include "testing/run_g4.h"

namespace g4 {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST(TemplateCli, PrintsExactlyTheRenderedPrompt) {
  const fs::path dir = TestTempDir("template_cli");
  Write(dir / "chat_template.jinja",
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
        "{% if tools %}T={{ tools | length }}{% endif %}{% if add_generation_prompt %}>{% endif %}"
        "{% if messages[0].role == 'system' %}{{ raise_exception('system refused') }}{% endif %}");
  Write(dir / "tokenizer_config.json", R"({"bos_token": "<s>"})");
  Write(dir / "request.json", R"({"messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]})");
  G4RunResult file = RunG4("template --model " + dir.string() + " --request " + (dir / "request.json").string(), false);
  EXPECT_EQ(file.exit_code, 0);
  EXPECT_EQ(file.output, "<s>[user:hi]T=1>");  // no trailing newline
  Write(dir / "stdin.json", R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": false})");
  G4RunResult piped =
      RunG4("template --model " + dir.string() + " --request - < " + (dir / "stdin.json").string(), false);
  EXPECT_EQ(piped.exit_code, 0);
  EXPECT_EQ(piped.output, "<s>[user:x]");

  Write(dir / "system.json", R"({"messages": [{"role": "system", "content": "s"}]})");
  G4RunResult raised = RunG4("template --model " + dir.string() + " --request " + (dir / "system.json").string());
  EXPECT_NE(raised.exit_code, 0);
  EXPECT_NE(raised.output.find("system refused"), std::string::npos) << raised.output;
  Write(dir / "bad.json", "{\"messages\": [");
  G4RunResult bad = RunG4("template --model " + dir.string() + " --request " + (dir / "bad.json").string());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("not valid JSON"), std::string::npos) << bad.output;
  Write(dir / "chat_template.jinja", "{% if x %}unclosed");
  G4RunResult unparsable = RunG4("template --model " + dir.string() + " --request " + (dir / "request.json").string());
  EXPECT_NE(unparsable.exit_code, 0);
  EXPECT_NE(unparsable.output.find("chat_template.jinja"), std::string::npos) << unparsable.output;
}

TEST(TemplateCli, InspectNamesTheTemplateSourceAndVersion) {
  const std::string model = TinyCheckpoint("e2b");
  ASSERT_FALSE(model.empty());
  const fs::path dir = TestTempDir("template_inspect");
  for (const auto& entry : fs::directory_iterator(model)) fs::create_symlink(entry.path(), dir / entry.path().filename());
  G4RunResult builtin = RunG4("inspect --model " + dir.string());
  EXPECT_NE(builtin.output.find("chat template: built-in Gemma-4 format"), std::string::npos) << builtin.output;
  // Version markers of Google's v3 large template (the file itself is not in the repository).
  Write(dir / "chat_template.jinja", "{{ bos_token }}{#- OpenAI Chat Completions -#}{% set filter_keys = [] %}"
                                     "{{ '<|turn>model\\n' }}{{ '<|channel>thought\\n<channel|>' }}");
  G4RunResult v3 = RunG4("inspect --model " + dir.string());
  EXPECT_NE(v3.output.find("chat template: chat_template.jinja (gemma4-v3-large)"), std::string::npos) << v3.output;
  fs::remove(dir / "chat_template.jinja");
  Write(dir / "tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  G4RunResult config = RunG4("inspect --model " + dir.string());
  EXPECT_NE(config.output.find("chat template: tokenizer_config.json (unknown/custom)"), std::string::npos) << config.output;
}

}  // namespace
}  // namespace g4
