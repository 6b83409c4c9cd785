// Unit tests of the Jinja engine, feature by feature. Expected strings are what Python Jinja2
// 3.1 renders under Hugging Face's environment (the differential test checks many more).
#include "template/template.h"

#include <gtest/gtest.h>

namespace g4::jinja {
namespace {

std::string Render(const std::string& source, const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  auto tmpl = Template::Parse(source);
  if (!tmpl.ok()) return "PARSE ERROR: " + tmpl.status().message();
  auto out = tmpl->Render(context);
  if (!out.ok()) return "RENDER ERROR: " + out.status().message();
  return *out;
}

bool Fails(const std::string& source, const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  auto tmpl = Template::Parse(source);
  return !tmpl.ok() || !tmpl->Render(context).ok();
}

TEST(TemplateValues, PrintLikePython) {
  EXPECT_EQ(Render("{{ 1 }} {{ 1.0 }} {{ 1e-5 }} {{ 1.5e20 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }}"), "1 1.0 1e-05 1.5e+20 0.30000000000000004 2.5");
  EXPECT_EQ(Render("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'a': 1} }} {{ (1,) }}"), "None True [1, 'a', None] {'a': 1} (1,)");
  EXPECT_EQ(Render("{{ [\"it's\"] }}"), "[\"it's\"]");
  EXPECT_EQ(Render("{{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"), "-4 2 1024");
}

TEST(TemplateValues, StringsIndexByCodePoint) {
  EXPECT_EQ(Render("{{ s[::-1] }} {{ s|length }} {{ s[1:] }}", {{"s", "αβγ"}}), "γβα 3 βγ");
}

TEST(TemplateValues, KeyOrderIsTheClients) {
  auto context = nlohmann::ordered_json::parse(R"({"d": {"z": 1, "a": 2}})");
  EXPECT_EQ(Render("{{ d|tojson }} {% for k in d %}{{ k }}{% endfor %}", context), "{\"z\": 1, \"a\": 2} za");
}

TEST(TemplateStatements, LoopVariables) {
  EXPECT_EQ(Render("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.revindex }};{% endfor %}"),
            "1TrueFalse3;2FalseFalse2;3FalseTrue1;");
  EXPECT_EQ(Render("{% for x in [1,2,3,4] if x is even %}{{ x }}/{{ loop.length }}{% endfor %}"), "2/24/2");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "13");
}

TEST(TemplateStatements, ScopingFollowsJinja2) {
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"), "231");
  EXPECT_EQ(Render("{% set ns = namespace(t=0) %}{% for i in [1,2] %}{% set ns.t = ns.t + i %}{% endfor %}{{ ns.t }}"), "3");
  EXPECT_EQ(Render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
}

TEST(TemplateStatements, MacrosAndCallBlocks) {
  EXPECT_EQ(Render("{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }} {{ f(1, b=3) }}"), "1-2 1-3");
  EXPECT_EQ(Render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"), "<in>");
  EXPECT_EQ(Render("{% set c %}x{{ 1 }}{% endset %}[{{ c }}]"), "[x1]");
}

TEST(TemplateWhitespace, TrimAndLstripBlocks) {
  EXPECT_EQ(Render("  {% if true %}\n    a\n  {% endif %}\nb"), "    a\nb");
  EXPECT_EQ(Render("x  {{- ' y ' -}}  z"), "x y z");
  EXPECT_EQ(Render("a\n{#- c -#}\n b"), "ab");
  EXPECT_EQ(Render("a\n"), "a");  // keep_trailing_newline is off
}

TEST(TemplateFilters, CommonFilters) {
  EXPECT_EQ(Render("{{ 'Hi'|upper }} {{ ' x '|trim }} {{ [1,2]|join(',') }} {{ missing|default('d') }}"), "HI x 1,2 d");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 2}|dictsort }}"), "[('a', 2), ('b', 1)]");
  EXPECT_EQ(Render("{{ [{'n': 'a'}, {'n': 'b'}]|map(attribute='n')|list }}"), "['a', 'b']");
  EXPECT_EQ(Render("{{ 'ü'|tojson }} {{ {'a': [1, 2]}|tojson(indent=2) }}"), "\"ü\" {\n  \"a\": [\n    1,\n    2\n  ]\n}");
}

TEST(TemplateMethods, PythonStringAndDictMethods) {
  EXPECT_EQ(Render("{{ 'a,b'.split(',') }} {{ 'xax'.strip('x') }} {{ 'ab'.startswith('a') }} {{ {'k': 1}.get('z', 0) }}"),
            "['a', 'b'] a True 0");
}

TEST(TemplateUndefined, BehavesAsJinja2Default) {
  EXPECT_EQ(Render("[{{ missing }}]{{ missing is defined }}{{ missing|length }}"), "[]False0");
  EXPECT_TRUE(Fails("{{ missing.attr }}"));
  EXPECT_EQ(Render("{{ none.attr }}|{{ {}.x }}"), "|");
}

TEST(TemplateErrors, NameTheLine) {
  auto tmpl = Template::Parse("a\n{% if x %}\nb");
  ASSERT_FALSE(tmpl.ok());
  EXPECT_NE(tmpl.status().message().find("line 3"), std::string::npos) << tmpl.status().message();
  auto raised = Template::Parse("x\n{{ raise_exception('boom') }}")->Render(nlohmann::ordered_json::object());
  ASSERT_FALSE(raised.ok());
  EXPECT_EQ(raised.status().message(), "line 2: boom");
  EXPECT_TRUE(Fails("{{ x|nosuchfilter }}"));
  EXPECT_TRUE(Fails("{{ [1].append(2) }}"));  // the immutable sandbox refuses mutation
}

TEST(TemplateLimits, HostileTemplatesEndInErrors) {
  EXPECT_TRUE(Fails("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"));
  RenderLimits small;
  small.max_steps = 200'000;  // the default (5M) ends the same loop, only later
  auto nested = Template::Parse("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_TRUE(nested.ok());
  EXPECT_FALSE(nested->Render(nlohmann::ordered_json::object(), small).ok());
  EXPECT_TRUE(Fails("{% set ns = namespace(s='xx') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"));
  EXPECT_TRUE(Fails("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"));
  EXPECT_TRUE(Fails("{{ range(1000000) }}"));
}

}  // namespace
}  // namespace g4::jinja
