# Tokenizer tests against ../shared/fixtures/tokenizer.
tessera_add_test(tokenizer_test LABELS unit
  SOURCES text/fixture_test.cpp text/tokenizer_test.cpp text/malformed_test.cpp
  LIBS tessera_text)
