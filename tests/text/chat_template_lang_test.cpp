// The Jinja subset, one feature at a time, with the values Jinja2 under HF's
// settings (trim_blocks, lstrip_blocks, Python's str()) prints.
#include <gtest/gtest.h>

#include "text/chat_template_util.h"

namespace tessera::text::testing {
namespace {

using nlohmann::ordered_json;

TEST(ChatTemplateExpr, Arithmetic) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 10 }}"), "7|9|1024");
  EXPECT_EQ(render("{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}"), "3|-4|2|-2");
  EXPECT_EQ(render("{{ 7 / 2 }}|{{ 4 / 2 }}|{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 1.5e-7 }}"),
            "3.5|2.0|0.30000000000000004|1e+20|1.5e-07");
  EXPECT_EQ(render("{{ -3 }}|{{ - -3 }}|{{ 1_000 + 1 }}|{{ true + 1 }}"), "-3|3|1001|2");
}

TEST(ChatTemplateExpr, StringsListsDicts) {
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ 'x' + 'y' }}"),
            "a1NoneTrue|ababab|xy");
  EXPECT_EQ(render(R"({{ "a\tb\u00e9\x41\\" }}|{{ 'it\'s' }}|{{ "con" 'cat' }})"),
            "a\tb\xC3\xA9"
            "A\\|it's|concat");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.0] }}|{{ {'k': 'v', 'n': [1]} }}"),
            "[1, 'a', None, True, 1.0]|{'k': 'v', 'n': [1]}");
  EXPECT_EQ(render("{{ [1, 2] + [3] }}|{{ [0] * 3 }}|{{ \"it's\" ~ [\"it's\"] }}"),
            "[1, 2, 3]|[0, 0, 0]|it's[\"it's\"]");
  EXPECT_EQ(render("{{ none }}|{{ True }}|{{ false }}|{{ undefined_name }}|"), "None|True|False||");
}

TEST(ChatTemplateExpr, ComparisonsAndLogic) {
  EXPECT_EQ(render("{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ [1] != [1] }}"),
            "TrueFalseTrueTrueFalse");
  EXPECT_EQ(
      render("{{ 'at' in 'cat' }}{{ 3 not in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 'x' in nothing }}"),
      "TrueTrueTrueFalse");
  EXPECT_EQ(render("{{ none or 'x' }}|{{ 0 and 1 }}|{{ not 0 }}|{{ not 1 == 2 }}"),
            "x|0|True|True");
  EXPECT_EQ(
      render(
          "{{ 'y' if 1 > 2 else 'n' }}|{{ 'y' if false }}|{{ 'a' if 0 else 'b' if 1 else 'c' }}"),
      "n||b");
}

TEST(ChatTemplateExpr, AttributesItemsSlices) {
  const ordered_json vars = {{"d", {{"a", 1}, {"b", {{"c", "deep"}}}}}, {"xs", {1, 2, 3, 4}}};
  EXPECT_EQ(render_with("{{ d.a }}|{{ d['a'] }}|{{ d.b.c }}|{{ d.zz }}|{{ xs[0] }}|{{ xs[-1] }}|{{ "
                        "xs[9] }}|{{ xs.1 }}",
                        vars),
            "1|1|deep||1|4||2");
  EXPECT_EQ(
      render_with(
          "{{ xs[1:] }}|{{ xs[:-1] }}|{{ xs[::-1] }}|{{ xs[::2] }}|{{ xs[-2:] }}|{{ xs[5:] }}",
          vars),
      "[2, 3, 4]|[1, 2, 3]|[4, 3, 2, 1]|[1, 3]|[3, 4]|[]");
  EXPECT_EQ(
      render("{{ 'h\xC3\xA9llo'[1] }}|{{ 'h\xC3\xA9llo'[1:3] }}|{{ 'abc'[::-1] }}|{{ 'abc'[-1] }}"),
      "\xC3\xA9|\xC3\xA9l|cba|c");
}

TEST(ChatTemplateFilters, TextFilters) {
  EXPECT_EQ(render("[{{ '  a b \n' | trim }}]{{ 'xxhixx' | trim('x') }}"), "[a b]hi");
  EXPECT_EQ(render("{{ 'h\xC3\xA9llo' | length }}{{ [1, 2] | count }}{{ {'a': 1} | length }}{{ "
                   "nothing | length }}"),
            "5210");
  EXPECT_EQ(render("{{ 'aBc' | upper }}{{ 'AbC' | lower }}{{ 'hello wORLD' | title }}{{ 'hELLO' | "
                   "capitalize }}"),
            "ABCabcHello WorldHello");
  EXPECT_EQ(render("{{ '\xC3\xBC\xC3\xA9' | upper }}"), "\xC3\x9C\xC3\x89");
  EXPECT_EQ(render("{{ 'aaa' | replace('a', 'b') }}{{ 'aaa' | replace('a', 'b', 2) }}"), "bbbbba");
  EXPECT_EQ(render("{{ 1 | string ~ 'a' }}{{ '42' | int + 1 }}{{ 'x' | int }}{{ 3.9 | int }}{{ "
                   "'2.5' | float }}"),
            "1a43032.5");
  EXPECT_EQ(render("{{ 'a\nb' | indent(2) }}|{{ -3 | abs }}|{{ 2.567 | round(1) }}"),
            "a\n  b|3|2.6");
}

TEST(ChatTemplateFilters, ListFilters) {
  const ordered_json vars = {{"msgs",
                              {{{"role", "user"}, {"content", "a"}},
                               {{"role", "assistant"}, {"content", "b"}, {"hidden", true}},
                               {{"role", "user"}, {"content", "c"}}}}};
  EXPECT_EQ(render_with("{{ msgs | selectattr('role', 'equalto', 'user') | "
                        "map(attribute='content') | join(',') }}",
                        vars),
            "a,c");
  EXPECT_EQ(render_with("{{ msgs | rejectattr('hidden') | list | length }}|{{ msgs | "
                        "selectattr('hidden') | first }}",
                        vars),
            "2|{'role': 'assistant', 'content': 'b', 'hidden': True}");
  EXPECT_EQ(render("{{ [1, 2, 3] | select('odd') | list }}{{ ['a', 'b'] | map('upper') | join }}"),
            "[1, 3]AB");
  EXPECT_EQ(render("{{ ['x', 'code', 'y'] | reject('equalto', 'code') | join(', ') }}"), "x, y");
  EXPECT_EQ(
      render("{{ [1, 2, 3] | first }}{{ 'abc' | last }}{{ 'ab' | list }}{{ [3, 1, 2] | sort }}"),
      "1c['a', 'b'][1, 2, 3]");
  EXPECT_EQ(render("{{ [1, 1, 2] | unique | list }}{{ [1, 2] | reverse | list }}{{ [1, 2, 3] | sum "
                   "}}{{ [4, 9] | max }}"),
            "[1, 2][2, 1]69");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | items | map('first') | join }}"
                   "{{ {'b': 1, 'a': 2} | dictsort | map('last') | join }}"),
            "ba21");
}

TEST(ChatTemplateFilters, DefaultAndToJson) {
  EXPECT_EQ(render("{{ nothing | default('d') }}|{{ '' | default('d') }}|{{ '' | default('d', "
                   "true) }}|{{ nothing | d }}"),
            "d||d|");
  EXPECT_EQ(render(R"({{ {"a": [1, "é"], "b": none, "c": 1.5, "d": true} | tojson }})"),
            R"({"a": [1, "é"], "b": null, "c": 1.5, "d": true})");
  EXPECT_EQ(render(R"({{ {"a": [1, {}], "b": []} | tojson(indent=2) }})"),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  EXPECT_EQ(render(R"({{ "q\"b\\s\n\u0001<>&'" | tojson }})"), R"("q\"b\\s\n\u0001<>&'")");
  EXPECT_EQ(
      render(
          R"({{ "é😀" | tojson(ensure_ascii=true) }}|{{ {"b": 1, "a": 2} | tojson(sort_keys=true) }})"),
      R"("\u00e9\ud83d\ude00"|{"a": 2, "b": 1})");
  // Key order is the input's order, as HF's json.dumps keeps it.
  EXPECT_EQ(render_with("{{ tool | tojson }}", {{"tool", {{"z", 1}, {"a", 2}}}}),
            R"({"z": 1, "a": 2})");
}

TEST(ChatTemplateTests, Builtins) {
  EXPECT_EQ(
      render("{{ 1 is odd }}{{ 2 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}"),
      "TrueTrueTrueFalse");
  EXPECT_EQ(render("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 1 is not none }}"),
            "FalseTrueTrueTrue");
  EXPECT_EQ(render("{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable "
                   "}}{{ 1 is iterable }}"),
            "TrueTrueTrueTrueFalse");
  EXPECT_EQ(render("{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ false is false }}{{ 0 "
                   "is false }}{{ true is true }}"),
            "TrueTrueTrueTrueFalseTrue");
  EXPECT_EQ(render("{{ 'a' is equalto 'a' }}{{ 1 is eq 2 }}{{ 1 is sameas 1 }}{{ 'A' is upper }}{{ "
                   "2 is gt 1 }}"),
            "TrueFalseTrueTrueTrue");
  EXPECT_EQ(render("{{ not x is defined }}{{ x is not defined and true }}"), "TrueTrue");
}

TEST(ChatTemplateMethods, StringAndDict) {
  EXPECT_EQ(render("[{{ ' a '.strip() }}][{{ 'xhix'.strip('x') }}][{{ '\n\nhi\n'.lstrip('\n') "
                   "}}][{{ 'hi  '.rstrip() }}]"),
            "[a][hi][hi\n][hi]");
  EXPECT_EQ(render("{{ ' a  b '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ "
                   "'a,b,c'.rsplit(',', 1) }}"),
            "['a', 'b']['a', 'b', '', 'c']['a', 'b,c']['a,b', 'c']");
  EXPECT_EQ(render("{{ 'x</think>y'.split('</think>')[-1] }}{{ 'hello'.startswith(('he', 'x')) "
                   "}}{{ 'hello'.endswith('lo') }}"),
            "yTrueTrue");
  EXPECT_EQ(render("{{ 'aaa'.replace('a', 'b', 2) }}{{ 'abc'.upper() }}{{ 'a b'.title() }}{{ "
                   "'abcb'.find('b') }}{{ 'abcb'.count('b') }}"),
            "bbaABCA B12");
  EXPECT_EQ(render("{{ '-'.join(['a', 'b']) }}{{ '12'.isdigit() }}{{ 'a\nb'.splitlines() }}"),
            "a-bTrue['a', 'b']");
  const ordered_json vars = {{"d", {{"a", 1}, {"b", 2}}}};
  EXPECT_EQ(render_with("{{ d.get('a') }}{{ d.get('zz', 'no') }}{{ d.get('zz') }}{{ d.keys() | "
                        "list }}{{ d.values() | list }}"
                        "{{ d.items() | map('last') | list }}",
                        vars),
            "1noNone['a', 'b'][1, 2][1, 2]");
}

TEST(ChatTemplateStatements, ForLoops) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
                   "loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
            "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}"),
            "-2,1-3,2-,");
  EXPECT_EQ(
      render("{% for x in [] %}x{% else %}empty{% endfor %}{% for x in nothing %}x{% endfor %}"),
      "empty");
  EXPECT_EQ(render("{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }},{% endfor %}"),
            "15,35,55,75,95,");
  EXPECT_EQ(render_with("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ "
                        "k }}{% endfor %}",
                        {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;ba");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 "
                   "%}{% break %}"
                   "{% endif %}{{ x }}{% endfor %}"),
            "0134");
  EXPECT_EQ(render("{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} {% "
                   "endfor %}{% endfor %}"),
            "1x1 1y2 2x1 2y2 ");
}

TEST(ChatTemplateStatements, SetAndScopes) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}"),
            "21");
  EXPECT_EQ(
      render("{% set ns = namespace(n=0, s='') %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
             "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}"),
      "3 012");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, d) = [3, 4] %}{{ c }}{{ d }}"),
            "1234");
  EXPECT_EQ(render("{% set x %}hi {{ 1 + 1 }}{% endset %}[{{ x }}]"), "[hi 2]");
  EXPECT_EQ(render("{% if false %}a{% elif 0 %}b{% elif 1 %}c{% else %}d{% endif %}"), "c");
  EXPECT_EQ(render_with("{% set messages = messages[1:] %}{{ messages | length }}", {},
                        ordered_json::array({{{"role", "system"}}, {{"role", "user"}}})),
            "1");
}

TEST(ChatTemplateStatements, MacrosFiltersRawComments) {
  EXPECT_EQ(render("{% macro g(name, p='Hi') %}{{ p }} {{ name }}{% endmacro %}{{ g('A') }}|{{ "
                   "g('B', p='Yo') }}|"
                   "{{ g(name='C') }}"),
            "Hi A|Yo B|Hi C");
  EXPECT_EQ(
      render(
          "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"),
      "321");
  EXPECT_EQ(render("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(render("a{# a comment {{ x }} #}b"), "ab");
  EXPECT_EQ(render("{% generation %}text{% endgeneration %}{% do [1] %}"), "text");
}

TEST(ChatTemplateWhitespace, TrimAndLstripBlocks) {
  EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(render("  {% if true %}\n  A\n  {% endif %}\n"), "  A\n");
  EXPECT_EQ(render("x {% if true %}y{% endif %}"), "x y");  // not at a line start: kept
  EXPECT_EQ(render("  {{ 'x' }}"), "  x");                  // lstrip_blocks skips {{ }}
  EXPECT_EQ(render("{# c #}\nA\n  {# d #}\nB"), "A\nB");
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
}

TEST(ChatTemplateWhitespace, MinusMarkersAndNewlines) {
  EXPECT_EQ(render("a  \n {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(render("{%- if true -%}  x  {%- endif -%}  "), "x");
  EXPECT_EQ(render("a {#- c -#} b"), "ab");
  EXPECT_EQ(render("{{ 'x' }}\n"), "x");  // one trailing newline dropped
  EXPECT_EQ(render("{{ 'x' }}\n\n"), "x\n");
  EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");                      // newlines normalised
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");  // }} inside braces
}

}  // namespace
}  // namespace tessera::text::testing
