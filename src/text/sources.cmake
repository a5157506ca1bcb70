# Tokenizers, relative to src/.
list(APPEND TESSERA_TEXT_SOURCES
  text/bpe.cpp
  text/pre_tokenizer.cpp
  text/spm.cpp
  text/tokenizer.cpp
  text/unicode.cpp
  text/vocab.cpp
)
