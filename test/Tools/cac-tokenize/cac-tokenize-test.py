#!/usr/bin/env python3
"""cac-tokenize on a tiny byte-level BPE folder written here: encoding lines
to JSON id lists, decoding them back, special tokens, --chat/--chat-text
through a small chat template, and the errors for a bad folder, an
unsupported tokenizer kind or chat template, a bad input line and a bad
command line.

  python3 cac-tokenize-test.py CAC_TOKENIZE
"""
import json
import os
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def byte_symbols():
    printable = [b for b in range(256) if 33 <= b <= 126 or 0xA1 <= b <= 0xAC
                 or 0xAE <= b <= 0xFF]
    out, n = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def tokenizer_json(model_type="BPE"):
    sym = byte_symbols()
    vocab = {sym[b]: b for b in range(256)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w")]
    for k, (a, b) in enumerate(merges):
        vocab[a + b] = 256 + k
    return {
        "added_tokens": [{"id": 300, "content": "<|end|>", "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                          "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"Sequence": {"id": "A"}},
                                      {"SpecialToken": {"id": "<|end|>"}}],
                           "special_tokens": {}},
        "model": {"type": model_type, "vocab": vocab,
                  "merges": [a + " " + b for a, b in merges]},
    }


def run(args, stdin=""):
    p = subprocess.run([TOOL] + args, input=stdin.encode(),
                       capture_output=True)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


with tempfile.TemporaryDirectory() as d:
    folder = os.path.join(d, "model")
    os.mkdir(folder)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(), f)

    # Encoding: one JSON list per line; NFC applies (e + U+0301 is é).
    rc, out, err = run([folder], "hello world\n\ncafe\u0301<|end|>\n")
    check(rc == 0, "encode exits 0: %s" % err)
    lines = out.split("\n")
    check(lines[0] == "[258,111,259,111,114,108,100]", "hello world: " + lines[0])
    check(lines[1] == "[]", "empty line: " + lines[1])
    check(lines[2] == "[99,97,102,195,169,300]", "café<|end|>: " + lines[2])
    check(len(lines) == 4 and lines[3] == "", "one output line per input")
    rc, out, _ = run([folder, "--add-special-tokens"], "he\n")
    check(out == "[256,300]\n", "--add-special-tokens: " + out)

    # Decoding, with and without the special tokens.
    rc, out, err = run([folder, "--decode"], "[258,111,259]\n[99, 300]\n")
    check(rc == 0 and out == "hello w\nc<|end|>\n", "decode: %r %s" % (out, err))
    rc, out, _ = run([folder, "--decode", "--skip-special-tokens"], "[99,300]\n")
    check(out == "c\n", "--skip-special-tokens: %r" % out)

    # A bad line names its line number and what is wrong; earlier lines are
    # already out.
    for bad, want in [("[1, 2", "not JSON"), ('{"a": 1}', "not a JSON list"),
                      ('[1, "x"]', 'element 1 ("x") is not an integer'),
                      ("[99999]", "99999")]:
        rc, out, err = run([folder, "--decode"], "[104]\n" + bad + "\n")
        check(rc == 1 and out == "h\n" and "<stdin>:2: " in err and want in err,
              "bad line %s: rc %d, %r" % (bad, rc, err))

    # --chat: a message list per line through tokenizer_config.json's
    # chat_template; the added token <|end|> in the text is its one id.
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|end|>", "chat_template":
                   "{% for m in messages %}{{ m.role }}: {{ m.content }}"
                   "{{ eos_token }}{% endfor %}"
                   "{% if add_generation_prompt %}assistant:{% endif %}"}, f)
    one = '[{"role": "user", "content": "hello"}]\n'
    rc, out, err = run([folder, "--chat-text"], one)
    check(rc == 0 and out == '"user: hello<|end|>assistant:"\n',
          "--chat-text: %r %s" % (out, err))
    rc, out, err = run([folder, "--chat-text", "--no-generation-prompt"], one)
    check(rc == 0 and out == '"user: hello<|end|>"\n',
          "--no-generation-prompt: %r %s" % (out, err))
    rc, out, err = run([folder, "--chat", "--no-generation-prompt"], one)
    check(rc == 0 and json.loads(out)[-1] == 300 and out.count("300") == 1,
          "--chat ids end with <|end|>'s id 300: %r %s" % (out, err))
    for bad, want in [("[1, 2", "not JSON"), ('{"a": 1}', "not a JSON list")]:
        rc, out, err = run([folder, "--chat-text"], one + bad + "\n")
        check(rc == 1 and out.count("\n") == 1 and "<stdin>:2: " in err
              and want in err, "bad --chat line %s: rc %d, %r" % (bad, rc, err))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": "{% macro x() %}{% endmacro %}"}, f)
    rc, _, err = run([folder, "--chat"], one)
    check(rc == 1 and "tokenizer_config.json: field 'chat_template': 1:4: "
          "unsupported statement 'macro'" in err, "outside the subset: " + err)
    os.remove(os.path.join(folder, "tokenizer_config.json"))
    rc, _, err = run([folder, "--chat"], one)
    check(rc == 1 and "tokenizer_config.json: cannot read it" in err,
          "no tokenizer_config.json: " + err)

    # A folder without tokenizer.json, and a tokenizer kind cac lacks.
    rc, _, err = run([os.path.join(d, "nowhere")], "x\n")
    check(rc == 1 and "nowhere" in err and "no tokenizer.json" in err,
          "missing folder: " + err)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json("WordPiece"), f)
    rc, _, err = run([folder], "x\n")
    check(rc == 1 and "tokenizer.json" in err and "WordPiece" in err,
          "unsupported kind: " + err)

    # Command-line mistakes print the usage and exit 2.
    for args in [[], [folder, "--bogus"], [folder, folder],
                 [folder, "--skip-special-tokens"],
                 [folder, "--decode", "--add-special-tokens"],
                 [folder, "--chat", "--decode"],
                 [folder, "--chat", "--add-special-tokens"],
                 [folder, "--no-generation-prompt"],
                 [folder, "--chat", "--var", "novalue"]]:
        rc, _, err = run(args)
        check(rc == 2 and "usage: cac-tokenize" in err,
              "usage for %s: %d %s" % (args, rc, err))
    rc, out, _ = run(["--help"])
    check(rc == 0 and "usage: cac-tokenize" in out, "--help")

print("%d passed, %d failed" % (checks - len(failures), len(failures)))
sys.exit(1 if failures else 0)
