//===- chat-template-test.cpp - The chat template renderer ----------------===//
//
// Each construct of the supported Jinja2 subset against what Jinja2 renders
// with Hugging Face's settings (the expected strings are python3-jinja2's
// output for the same source and variables), the errors with their
// positions, and loading a template from a model folder.
// test/Tools/cac-tokenize/compare-chat-jinja2.py checks whole real templates.
//
//===----------------------------------------------------------------------===//

#include "cac/Runtime/Model/ChatTemplate.h"

#include "test-util.h"

#include <gtest/gtest.h>

using nlohmann::ordered_json;
using namespace cac::rt;
using namespace cac::rt::test;

namespace {

/// Renders \p source with the variables of the JSON object \p vars.
std::string render(const std::string &source, const std::string &vars = "{}",
                   const std::string &messages = "[]",
                   bool addGenerationPrompt = false) {
  ChatTemplate t(source, "T");
  return t.render(ordered_json::parse(messages), addGenerationPrompt,
                  ordered_json::parse(vars));
}

struct Case {
  const char *what, *source, *vars, *expected;
};

// Expected: python3-jinja2 3.1 in ImmutableSandboxedEnvironment(trim_blocks,
// lstrip_blocks, loopcontrols) with json.dumps as tojson.
const Case kCases[] = {
    {"text and output; the final newline dropped", "a {{ 'b' }} c\n", "{}",
     "a b c"},
    {"{%- and -%} strip whitespace and newlines",
     "  {%- if true %}x{% endif -%}  \n  y", "{}", "xy"},
    {"trim_blocks drops the newline after a block tag",
     "{% if true %}\nA\n{% endif %}\nB", "{}", "A\nB"},
    {"lstrip_blocks drops a block tag's indentation",
     "    {% if true %}\n    A\n    {% endif %}\n", "{}", "    A\n"},
    {"lstrip_blocks keeps text before a tag on its line",
     "x  {% if true %}A{% endif %}", "{}", "x  A"},
    {"comments vanish, with trim_blocks", "{{ 1 }}  {# c #}\n{{ 2 }}", "{}",
     "1  2"},
    {"loop variables",
     "{% for m in ms %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ "
     "loop.last }}{{ loop.length }}{{ loop.revindex0 }}{{ m }};{% endfor %}",
     "{\"ms\": [\"a\", \"b\", \"c\"]}",
     "01TrueFalse32a;12FalseFalse31b;23FalseTrue30c;"},
    {"for-else on an empty list",
     "{% for m in [] %}x{% else %}empty{% endfor %}", "{}", "empty"},
    {"break and continue",
     "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i "
     "== 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "{}", "0134"},
    {"a loop filter counts only the kept items",
     "{% for i in range(6) if i is odd %}{{ i }}/{{ loop.length }} {% endfor "
     "%}",
     "{}", "1/3 3/3 5/3 "},
    {"tuple unpacking over items",
     "{% for k, v in d | items %}{{ k }}={{ v }},{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": [1, \"x\"]}}", "b=1,a=[1, 'x'],"},
    {"if/elif/else",
     "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}",
     "{\"x\": 2}", "two"},
    {"set inside a loop is local to the iteration",
     "{% set x = 0 %}{% for i in [1,2] %}{{ x }}{% set x = x + i %}{{ x }},{% "
     "endfor %}{{ x }}",
     "{}", "01,02,0"},
    {"namespace() carries values out of a loop",
     "{% set ns = namespace(n=0, s='') %}{% for i in [1,2,3] %}{% set ns.n = "
     "ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}",
     "{}", "6 123"},
    {"concatenation and arithmetic",
     "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 7 "
     "// 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'ab' * 3 "
     "}}",
     "{}", "a1NoneTrue1.5 ab [1, 2] 3 -4 2 3.5 1024 ababab"},
    {"filters bind tighter than +; comparison chains",
     "{{ 'x' + ' y ' | trim + 'z' }} {{ -3 | abs }} {{ not 1 == 2 }} {{ 1 < 2 "
     "< 3 }} {{ 1 < 3 < 2 }}",
     "{}", "xyz 3 True True False"},
    {"in, not in, conditional expressions",
     "{{ 'ell' in 'hello' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ "
     "'a' if false }}|{{ 'a' if 0 else 'b' }}",
     "{}", "True False True |b"},
    {"slices and indices by character",
     "{{ s[::-1] }} {{ s[1:3] }} {{ s[-1] }} {{ xs[-2:] }} {{ xs[::2] }} {{ "
     "s|length }}",
     "{\"s\": \"héllo\", \"xs\": [1, 2, 3, 4, 5]}",
     "olléh él o [4, 5] [1, 3, 5] 5"},
    {"string methods",
     "{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ s.startswith('<a') }}{{ "
     "s.endswith(('x', '>')) }}|{{ '  a b  '.split() }}|{{ 'xxhixx'.strip('x') "
     "}}|{{ 'a-b-c'.replace('-', '+', 1) }}",
     "{\"s\": \"<a>\\n\\n</think>\\n\\nok>\"}",
     "ok>|TrueTrue|['a', 'b']|hi|a+b-c"},
    {"attributes, keys and dict methods",
     "{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ m.get('role') }} {{ "
     "m.get('x', 'd') }} {{ m.keys() | list }}",
     "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}}",
     "user hi |user d ['role', 'content']"},
    {"tests",
     "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none "
     "}}{{ 's' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float "
     "}}{{ false is false }}{{ true is true }}{{ {} is mapping }}{{ 4 is "
     "divisibleby 2 }}{{ 3 is even }}{{ 1 is not none }}",
     "{\"x\": 1}",
     "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrue"},
    {"filters",
     "{{ y | default('d') }} {{ '' | default('e', true) }} {{ [1,2,3] | "
     "join(', ') }} {{ [3,4] | first }}{{ [3,4] | last }} {{ 'abc' | list }} "
     "{{ [1, 2] | reverse | list }} {{ 42 | string }} {{ '12' | int + 1 }} {{ "
     "2 | float }}",
     "{}", "d e 1, 2, 3 34 ['a', 'b', 'c'] [2, 1] 42 13 2.0"},
    {"select, reject, selectattr, map",
     "{{ xs | selectattr('on') | map(attribute='n') | join }} {{ [1, 2, 3, 4] "
     "| select('odd') | list }} {{ ['a', 'b'] | reject('equalto', 'a') | list "
     "}} {{ xs | length }}",
     "{\"xs\": [{\"n\": \"a\", \"on\": true}, {\"n\": \"b\", \"on\": false}]}",
     "a [1, 3] ['b'] 2"},
    {"tojson as Hugging Face's (json.dumps)",
     "{{ d | tojson }} {{ d | tojson(indent=2) }} {{ 'é\"\\n' | tojson }}",
     "{\"d\": {\"b\": [1, 2.5, null, true], \"a\": {}}}",
     "{\"b\": [1, 2.5, null, true], \"a\": {}} {\n  \"b\": [\n    1,\n    "
     "2.5,\n    null,\n    true\n  ],\n  \"a\": {}\n} \"é\\\"\\n\""},
    {"Python's printing of lists, dicts, tuples and floats",
     "{{ [1, 'a', none] }} {{ {'k': 'v'} }} {{ (1, 2) }} {{ 1e20 }} {{ 0.1 + "
     "0.2 }}",
     "{}", "[1, 'a', None] {'k': 'v'} (1, 2) 1e+20 0.30000000000000004"},
};

TEST(ChatTemplateTest, EachConstructRendersAsJinja2) {
  for (const Case &c : kCases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(render(c.source, c.vars), c.expected) << c.source;
  }
}

TEST(ChatTemplateTest, MessagesAndGenerationPrompt) {
  const char *src =
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}";
  const char *msgs =
      R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])";
  EXPECT_EQ(render(src, "{}", msgs, true), "<system>S<user>U<assistant>");
  EXPECT_EQ(render(src, "{}", msgs, false), "<system>S<user>U");
  // Variables given to render override the template's own.
  ChatTemplate t("{{ bos_token }}|{{ x }}", "T");
  t.setVariable("bos_token", "<s>");
  t.setVariable("x", 1);
  EXPECT_EQ(t.render(ordered_json::array(), false, {{"x", 2}}), "<s>|2");
}

TEST(ChatTemplateTest, PromptMessages) {
  EXPECT_EQ(promptMessages("", "Q").dump(),
            R"([{"role":"user","content":"Q"}])");
  EXPECT_EQ(
      promptMessages("S", "Q").dump(),
      R"([{"role":"system","content":"S"},{"role":"user","content":"Q"}])");
}

TEST(ChatTemplateTest, ConstructsOutsideTheSubsetAreParseErrors) {
  auto parse = [](const char *src) {
    return [src] { ChatTemplate(src, "ORIGIN"); };
  };
  EXPECT_ERROR(parse("ab\n  {% macro f() %}{% endmacro %}"),
               {"ORIGIN: 2:6: unsupported statement 'macro'", "for, if",
                "  {% macro f() %}", "     ^"});
  EXPECT_ERROR(parse("{{ x | upper }}"),
               {"ORIGIN: 1:8: unsupported filter 'upper'", "trim"});
  EXPECT_ERROR(parse("{{ x is callable }}"),
               {"ORIGIN: 1:9: unsupported test 'callable'", "defined"});
  EXPECT_ERROR(parse("{{ x.format(1) }}"),
               {"ORIGIN: 1:6: unsupported method 'format'", "startswith"});
  EXPECT_ERROR(parse("{% set x %}a{% endset %}"),
               {"ORIGIN: 1:10: block assignments"});
  EXPECT_ERROR(parse("{% for x in xs %}a"),
               {"ORIGIN: 1:19: missing '{% endfor %}'"});
  EXPECT_ERROR(parse("{% endif %}"), {"ORIGIN: 1:4: unexpected '{% endif %}'"});
  EXPECT_ERROR(parse("{{ x "), {"ORIGIN: 1:1: unclosed tag: '{{'"});
  EXPECT_ERROR(parse("{# x"), {"ORIGIN: 1:1: unclosed comment"});
  EXPECT_ERROR(parse("{{ 'abc }}"), {"ORIGIN: 1:4: unclosed string"});
  EXPECT_ERROR(parse("{{ a ? b }}"), {"ORIGIN: 1:6: unexpected character '?'"});
  EXPECT_ERROR(parse("{{ [1 2] }}"), {"ORIGIN: 1:7: expected ']', found '2'"});
  // As in Jinja2, an if statement's condition is no conditional expression.
  EXPECT_ERROR(parse("{% if a if b else c %}{% endif %}"),
               {"ORIGIN: 1:9: expected '%}', found 'if'"});
  // Inside brackets '}}' does not end the tag (as in Jinja2).
  EXPECT_ERROR(parse("{{ (a }}"), {"ORIGIN: 1:1: unclosed tag: '{{'"});
  EXPECT_ERROR(parse("{{ f(*xs) }}"), {"1:6: '*args'"});
  EXPECT_ERROR(parse("{{ range(*xs) }}"), {"1:10: '*args'"});
  // Columns count characters, not UTF-8 bytes.
  EXPECT_ERROR(parse("é{% foo %}"), {"ORIGIN: 1:5: unsupported statement"});
}

TEST(ChatTemplateTest, RenderErrorsNameTheirPosition) {
  auto run = [](const char *src, const char *vars = "{}") {
    return [src, vars] { render(src, vars); };
  };
  EXPECT_ERROR(run("{{ 1 }}\n{{ x + 'a' }}"), {"T: 2:4: 'x' is undefined"});
  EXPECT_ERROR(run("{{ m.a.b }}", R"({"m": {}})"),
               {"T: 1:6: 'a' is undefined"});
  EXPECT_ERROR(run("{{ m.content + '!' }}", R"({"m": {"content": null}})"),
               {"T: 1:14: unsupported operand types for +: NoneType and str"});
  EXPECT_ERROR(run("{{- raise_exception('Roles must alternate') }}"),
               {"T: 1:5: the template raised an exception: Roles must "
                "alternate"});
  EXPECT_ERROR(run("{% set x = 1 %}{% set x.a = 2 %}"),
               {"T: 1:16: cannot set an attribute of 'x' (int)"});
  // Functions outside the subset are undefined, and an error when called.
  EXPECT_EQ(render("{% if strftime_now is defined %}{{ strftime_now('%Y') "
                   "}}{% else %}fixed{% endif %}"),
            "fixed");
  EXPECT_ERROR(run("\n {{ strftime_now('%Y') }}"),
               {"T: 2:5: unsupported function 'strftime_now'", "namespace"});
  EXPECT_ERROR(run("{{ 1 // 0 }}"), {"T: 1:6: integer division or modulo"});
  EXPECT_ERROR(run("{{ 'a'.split('') }}"), {"split: empty separator"});
  EXPECT_ERROR(run("{{ x | tojson }}"), {"not JSON serializable"});
  EXPECT_ERROR(run("{% for a, b in [1] %}{% endfor %}"),
               {"cannot unpack int into 2 names"});
  EXPECT_ERROR(run("{% for x in 3 %}{% endfor %}"), {"int is not iterable"});
  EXPECT_ERROR(run("{{ 'ab' * 100000000 }}"), {"would exceed 64 MiB"});
  EXPECT_ERROR(run("{{ [1, 2] * 1000000 }}"), {"would exceed 1048576 items"});
  EXPECT_ERROR(run("{% for a in range(100000) %}{% for b in range(100000) "
                   "%}{% endfor %}{% endfor %}"),
               {"takes more than 2000000 steps"});
  EXPECT_EQ(render("{{ [1, 2, 3][1::9223372036854775807] }}"), "[2]");
  // Trees deeper than 100 are refused (rendering and freeing them recurse).
  std::string parens =
      "{{ " + std::string(150, '(') + "1" + std::string(150, ')') + " }}";
  EXPECT_ERROR(run(parens.c_str()), {"nested more than 100 deep"});
  std::string chain = "{{ x";
  for (int k = 0; k < 150; ++k)
    chain += ".a";
  chain += " }}";
  EXPECT_ERROR(run(chain.c_str()), {"nested more than 100 deep"});
  // A namespace attribute holds no namespace (a cycle of references would
  // never be freed) and no value nested deeper than 200.
  EXPECT_ERROR(run("{% set ns = namespace(x=0) %}{% set ns.me = ns %}"),
               {"T: 1:30: cannot set 'ns.me' to a value holding a namespace"});
  EXPECT_ERROR(run("{% set ns = namespace(x=0) %}{% set ns.x = [1, {'a': "
                   "[ns]}] %}"),
               {"holding a namespace"});
  EXPECT_EQ(render("{% set a = namespace(x=1) %}{% set b = namespace(inner=a) "
                   "%}{% set a.x = 2 %}{{ b.inner.x }}"),
            "2");
  EXPECT_ERROR(run("{% set ns = namespace(x=0) %}{% for i in range(100000) "
                   "%}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"),
               {"T: 1:58: cannot set 'ns.x': the value is nested more than "
                "200 deep"});
  EXPECT_EQ(render("{% set ns = namespace(x=0) %}{% for i in range(200) %}{% "
                   "set ns.x = [ns.x] %}{% endfor %}{{ (ns.x | tojson)[:3] "
                   "}}"),
            "[[[");
  EXPECT_ERROR(run("{{ range(100001) | length }}"), {"limited to 100000"});
  EXPECT_ERROR(run("{{ 9223372036854775807 + 1 }}"), {"integer overflow"});
}

TEST(ChatTemplateTest, LoadsTheTemplateOfAModelFolder) {
  TempDir dir;
  writeFile(dir / "tokenizer_config.json",
            R"({"bos_token": {"content": "<s>", "lstrip": false},
                "eos_token": "</s>", "pad_token": null,
                "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}{{ pad_token is defined }}"})");
  ChatTemplate t = loadChatTemplate(dir.path());
  EXPECT_EQ(t.render(promptMessages("", "hi"), true), "<s>hi</s>False");
  EXPECT_EQ(t.origin(), (dir / "tokenizer_config.json").string() +
                            ": field 'chat_template'");

  // A list of named templates: the default one.
  writeFile(dir / "tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                  {"name": "default", "template": "D"}]})");
  EXPECT_EQ(loadChatTemplate(dir.path()).render(ordered_json::array(), true),
            "D");

  // chat_template.jinja wins over the config's field.
  writeFile(dir / "chat_template.jinja", "J{{ eos_token }}\n");
  writeFile(dir / "tokenizer_config.json",
            R"({"eos_token": "E", "chat_template": "C"})");
  EXPECT_EQ(loadChatTemplate(dir.path()).render(ordered_json::array(), true),
            "JE");
}

TEST(ChatTemplateTest, FolderErrorsNameTheFileAndField) {
  TempDir dir;
  auto load = [&] { loadChatTemplate(dir.path()); };
  EXPECT_ERROR(load, {"tokenizer_config.json: cannot read it"});
  writeFile(dir / "tokenizer_config.json", "{");
  EXPECT_ERROR(load, {"tokenizer_config.json: not valid JSON"});
  writeFile(dir / "tokenizer_config.json", R"({"eos_token": "x"})");
  EXPECT_ERROR(load, {"tokenizer_config.json: no field 'chat_template'"});
  writeFile(dir / "tokenizer_config.json", R"({"chat_template": 3})");
  EXPECT_ERROR(load, {"tokenizer_config.json: field 'chat_template': must be "
                      "a string"});
  writeFile(dir / "tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_ERROR(load, {"without one named \"default\""});
  writeFile(
      dir / "tokenizer_config.json",
      R"({"chat_template": "{% for m in messages %}\n{% include 'x' %}"})");
  EXPECT_ERROR(load, {"tokenizer_config.json: field 'chat_template': 2:4: "
                      "unsupported statement 'include'"});
}

} // namespace
