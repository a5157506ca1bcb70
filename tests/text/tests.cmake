# Tokenizer tests against tests/fixtures/tokenizer (llama.cpp's test-tokenizer-0 sets).
tessera_add_test(tokenizer_test LABELS unit
  SOURCES text/fixture_test.cpp text/tokenizer_test.cpp text/malformed_test.cpp
  LIBS tessera_text)

# Chat templates: real templates against llama.cpp's renders, the Jinja
# subset, errors and limits, and mutated templates.
tessera_add_test(chat_template_test LABELS unit
  SOURCES text/chat_template_test.cpp text/chat_template_lang_test.cpp text/chat_template_safety_test.cpp
  LIBS tessera_text tessera_gguf nlohmann_json::nlohmann_json)
