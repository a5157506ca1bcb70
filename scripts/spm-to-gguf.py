#!/usr/bin/env python3
"""Writes a SentencePiece Unigram model (.model) as a vocabulary GGUF.

    scripts/spm-to-gguf.py MODEL OUT.gguf --name NAME [--bos TEXT] [--eos TEXT] [--pad TEXT]

The tokenizer.ggml.* keys are those llama.cpp's converter writes for
XLM-RoBERTa and T5 (tokenizer.ggml.model = "t5": its UGM tokenizer): the
pieces with their scores and types, the normalizer's precompiled_charsmap
and flags, the special ids, BOS and EOS added. No tensors: `tessera synth
--vocab OUT.gguf` gives a model this vocabulary. The protobuf is read by hand
(ModelProto: pieces = 1, trainer_spec = 2, normalizer_spec = 3).
"""
import argparse
import struct
import sys


def varint(b, i):
    value = shift = 0
    while True:
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return value, i


def fields(b):
    """(field number, value) of one protobuf message: ints, or bytes for length-delimited."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(b, i)
        elif wire == 1:
            value, i = b[i:i + 8], i + 8
        elif wire == 5:
            value, i = b[i:i + 4], i + 4
        elif wire == 2:
            n, i = varint(b, i)
            value, i = b[i:i + n], i + n
        else:
            sys.exit(f"spm-to-gguf: unsupported protobuf wire type {wire}")
        yield number, value


def read_model(path):
    data = open(path, "rb").read()
    pieces, trainer, normalizer = [], {}, {}
    for number, value in fields(data):
        if number == 1:
            p = dict(fields(value))
            score = struct.unpack("<f", p[2])[0] if 2 in p else 0.0
            pieces.append((p[1], score, p.get(3, 1)))  # type: NORMAL unless given
        elif number == 2:
            trainer = dict(fields(value))
        elif number == 3:
            normalizer = dict(fields(value))
    if trainer.get(3, 1) != 1:
        sys.exit(f"spm-to-gguf: {path}: model_type {trainer.get(3)}, expected 1 (UNIGRAM)")
    return pieces, trainer, normalizer


class Writer:
    STRING, ARRAY, UINT8, INT32, UINT32, FLOAT32, BOOL = 8, 9, 0, 5, 4, 6, 7

    def __init__(self):
        self.kv = []

    def string(self, s):
        b = s if isinstance(s, bytes) else s.encode()
        return struct.pack("<Q", len(b)) + b

    def add(self, key, kind, value, elem=None):
        out = self.string(key) + struct.pack("<I", kind)
        if kind == self.STRING:
            out += self.string(value)
        elif kind == self.UINT32:
            out += struct.pack("<I", value)
        elif kind == self.BOOL:
            out += struct.pack("<B", 1 if value else 0)
        elif kind == self.ARRAY:
            out += struct.pack("<IQ", elem, len(value))
            if elem == self.STRING:
                out += b"".join(self.string(v) for v in value)
            elif elem == self.FLOAT32:
                out += struct.pack(f"<{len(value)}f", *value)
            elif elem == self.INT32:
                out += struct.pack(f"<{len(value)}i", *value)
            elif elem == self.UINT8:
                out += bytes(value)
        self.kv.append(out)

    def write(self, path):
        # No tensors: the file ends with its header, as llama.cpp's vocabulary files do.
        open(path, "wb").write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(self.kv)) + b"".join(self.kv))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--name", required=True, help="general.name")
    ap.add_argument("--bos", default="<s>", help="the piece BOS is (default <s>)")
    ap.add_argument("--eos", default="</s>", help="the piece EOS is (default </s>)")
    ap.add_argument("--pad", default="<pad>", help="the piece padding is (default <pad>)")
    a = ap.parse_args()

    pieces, trainer, normalizer = read_model(a.model)
    index = {p[0]: i for i, p in enumerate(pieces)}
    for flag, text in (("--bos", a.bos), ("--eos", a.eos), ("--pad", a.pad)):
        if text.encode() not in index:
            sys.exit(f"spm-to-gguf: {a.model}: {flag} {text!r} is no piece of the model")
    w = Writer()
    w.add("general.architecture", w.STRING, "bert")
    w.add("general.name", w.STRING, a.name)
    w.add("tokenizer.ggml.model", w.STRING, "t5")
    w.add("tokenizer.ggml.pre", w.STRING, "default")
    w.add("tokenizer.ggml.tokens", w.ARRAY, [p[0] for p in pieces], w.STRING)
    w.add("tokenizer.ggml.scores", w.ARRAY, [p[1] for p in pieces], w.FLOAT32)
    w.add("tokenizer.ggml.token_type", w.ARRAY, [p[2] for p in pieces], w.INT32)
    w.add("tokenizer.ggml.token_type_count", w.UINT32, 1)  # XLM-RoBERTa: one token type
    w.add("tokenizer.ggml.add_space_prefix", w.BOOL, normalizer.get(3, 1) != 0)
    w.add("tokenizer.ggml.remove_extra_whitespaces", w.BOOL, normalizer.get(4, 1) != 0)
    if normalizer.get(2):
        w.add("tokenizer.ggml.precompiled_charsmap", w.ARRAY, normalizer[2], w.UINT8)
    unk = trainer.get(40, 0)  # TrainerSpec.unk_id
    w.add("tokenizer.ggml.unknown_token_id", w.UINT32, unk)
    w.add("tokenizer.ggml.bos_token_id", w.UINT32, index[a.bos.encode()])
    w.add("tokenizer.ggml.eos_token_id", w.UINT32, index[a.eos.encode()])
    w.add("tokenizer.ggml.padding_token_id", w.UINT32, index[a.pad.encode()])
    w.add("tokenizer.ggml.add_bos_token", w.BOOL, True)
    w.add("tokenizer.ggml.add_eos_token", w.BOOL, True)
    w.write(a.out)
    print(f"wrote {a.out}: {len(pieces)} pieces, charsmap {len(normalizer.get(2, b''))} bytes, "
          f"unk {unk}", file=sys.stderr)


if __name__ == "__main__":
    main()
