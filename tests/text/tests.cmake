# Tokenizer tests against ../shared/fixtures/tokenizer.
