# Tokenizers, relative to src/.
list(APPEND TESSERA_TEXT_SOURCES
  text/bpe.cpp
  text/pre_tokenizer.cpp
  text/spm.cpp
  text/tokenizer.cpp
  text/ugm.cpp
  text/unicode.cpp
  text/vocab.cpp
  text/wpm.cpp
)
# Chat templates: the public API, built-in templates, and the Jinja interpreter.
list(APPEND TESSERA_TEXT_SOURCES
  text/chat_template.cpp
  text/chat_template_builtins.cpp
  text/jinja/filters.cpp
  text/jinja/globals.cpp
  text/jinja/is_tests.cpp
  text/jinja/interpreter.cpp
  text/jinja/lexer.cpp
  text/jinja/methods.cpp
  text/jinja/operators.cpp
  text/jinja/parser.cpp
  text/jinja/parser_expr.cpp
  text/jinja/strings.cpp
  text/jinja/value.cpp
)
