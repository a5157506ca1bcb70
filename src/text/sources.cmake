# Tokenizers, relative to src/.
list(APPEND TESSERA_TEXT_SOURCES
)
