#!/usr/bin/env python3
"""cac-tokenize --chat-text against Jinja2 (Debian's python3-jinja2) set up
as Hugging Face's apply_chat_template sets it up: the immutable sandbox with
trim_blocks, lstrip_blocks and loop controls, a `tojson` that is
json.dumps(ensure_ascii=False) and a `raise_exception` global. Each message
list renders byte for byte alike, or fails in both.

  python3 compare-chat-jinja2.py CAC_TOKENIZE FOLDER {qwen3|llama3}

FOLDER holds the tokenizer_config.json whose chat_template is checked (the
real Qwen3 one is .deps/tokenizers/qwen3 from scripts/setup.sh; exit 77,
skipped, when that folder is absent). For qwen3 the ids of --chat are checked
too: every <|im_start|>/<|im_end|> is its one added-token id and the ids
decode to the rendered text.
"""
import json
import os
import subprocess
import sys

TOOL, FOLDER, KIND = sys.argv[1], sys.argv[2], sys.argv[3]
if not os.path.isfile(os.path.join(FOLDER, "tokenizer_config.json")):
    print("skipped: no %s/tokenizer_config.json (scripts/setup.sh installs "
          ".deps)" % FOLDER)
    sys.exit(77)
try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
except ImportError:
    print("FAIL: python3 cannot import jinja2 (install python3-jinja2, as "
          "scripts/setup.sh does)")
    sys.exit(1)

failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)


class Raised(Exception):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None,
           sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


with open(os.path.join(FOLDER, "tokenizer_config.json")) as f:
    config = json.load(f)
env = jinja2.sandbox.ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True,
    extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
template = env.from_string(config["chat_template"])
special = {k: config[k] for k in ("bos_token", "eos_token", "pad_token",
                                  "unk_token")
           if isinstance(config.get(k), str)}


def reference(messages, add_generation_prompt, variables):
    try:
        return template.render(messages=messages,
                               add_generation_prompt=add_generation_prompt,
                               **special, **variables)
    except (Raised, jinja2.exceptions.TemplateError, TypeError) as e:
        return e


def user(text):
    return {"role": "user", "content": text}


def assistant(text, **extra):
    return dict({"role": "assistant", "content": text}, **extra)


SYSTEM = {"role": "system", "content": "You are a careful math tutor.\n"}
QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she "
            "sold half as many clips in May. How many clips did she sell?")
COMMON = [
    [user(QUESTION)],
    [SYSTEM, user(QUESTION)],
    [user("Hi"), assistant("Hello! How can I help?"), user("  2+2?  ")],
    [SYSTEM, user("Übersetze: «naïve café» 日本語 🙂"), assistant("ok"),
     user("tabs\tand\nnew lines\n\n")],
    [user("")],
]
QWEN = [
    [user("Think first."),
     assistant("<think>\nstep 1\nstep 2\n</think>\n\nThe answer is 4.")],
    [user("a"), assistant("b", reasoning_content="because"), user("c"),
     assistant("d", reasoning_content="again")],
    [SYSTEM, user("What is 12*7?"),
     assistant("", tool_calls=[{"type": "function", "function": {
         "name": "calc", "arguments": {"expr": "12*7", "exact": True,
                                       "digits": 2.5}}}]),
     {"role": "tool", "content": "84"}, {"role": "tool", "content": "ok"},
     assistant("12*7 = 84.")],
    [user("x"), assistant("calling", tool_calls=[
        {"name": "lookup", "arguments": "{\"q\": \"x\"}"}])],
    [user("<tool_response>\nnot a query\n</tool_response>")],
    [{"role": "system", "content": "late system"}],
]
LLAMA = [
    [user("a"), user("b")],                      # not alternating: raises
    [{"role": "tool", "content": "x"}],          # unknown role: raises
    [SYSTEM, user("q"), assistant("a"), {"role": "ipython", "content": "{}"}],
]
TOOLS = [{"type": "function", "function": {
    "name": "calc", "description": "Evaluates arithmetic.",
    "parameters": {"type": "object",
                   "properties": {"expr": {"type": "string"}}}}}]

cases = []  # (messages, add_generation_prompt, variables)
for messages in COMMON + (QWEN if KIND == "qwen3" else LLAMA):
    cases.append((messages, True, {}))
    cases.append((messages, False, {}))
if KIND == "qwen3":
    for messages in COMMON[:3] + QWEN[2:3]:
        cases.append((messages, True, {"enable_thinking": False}))
        cases.append((messages, True, {"tools": TOOLS}))
else:
    cases.append((COMMON[0], True, {"default_system_message": "Be brief."}))


def run(args, stdin):
    p = subprocess.run([TOOL, FOLDER] + args, input=stdin.encode(),
                       capture_output=True)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


# One run of the tool per (add_generation_prompt, variables), each case one
# line; a case that fails stops the tool, so those run alone.
groups = {}
for messages, agp, variables in cases:
    key = (agp, json.dumps(variables, sort_keys=True))
    groups.setdefault(key, []).append(messages)
for (agp, variables), lists in groups.items():
    args = ["--chat-text"] + ([] if agp else ["--no-generation-prompt"])
    for name, value in json.loads(variables).items():
        args += ["--var", "%s=%s" % (name, json.dumps(value))]
    expected = [reference(m, agp, json.loads(variables)) for m in lists]
    good = [m for m, e in zip(lists, expected) if isinstance(e, str)]
    rc, out, err = run(args, "".join(json.dumps(m) + "\n" for m in good))
    check(rc == 0, "%s exits 0: %s" % (args, err))
    got = [json.loads(line) for line in out.splitlines()]
    want = [e for e in expected if isinstance(e, str)]
    check(len(got) == len(want), "%s: %d outputs for %d cases" %
          (args, len(got), len(want)))
    for m, g, w in zip(good, got, want):
        check(g == w, "%s %s:\n  got  %r\n  want %r" % (args, json.dumps(m),
                                                          g, w))
    for m, e in zip(lists, expected):
        if isinstance(e, str):
            continue
        rc, out, err = run(args, json.dumps(m) + "\n")
        check(rc == 1 and "tokenizer_config.json: field 'chat_template'" in err
              and str(e) in err,
              "%s %s fails as Jinja2 does (%s): rc %d, %s" %
              (args, json.dumps(m), e, rc, err.strip()))

if KIND == "qwen3":
    # The prompt's ids: each special marker is its single added-token id,
    # and the ids decode to the rendered text.
    messages = [SYSTEM, user(QUESTION), assistant("84"), user("And 2+2?")]
    text = reference(messages, True, {})
    rc, out, err = run(["--chat"], json.dumps(messages) + "\n")
    check(rc == 0, "--chat exits 0: " + err)
    ids = json.loads(out)
    check(ids.count(151644) == text.count("<|im_start|>") == 5,
          "<|im_start|> is id 151644, 5 times: %s" % ids)
    check(ids.count(151645) == text.count("<|im_end|>") == 4,
          "<|im_end|> is id 151645, 4 times: %s" % ids)
    rc, out, err = run(["--decode"], json.dumps(ids) + "\n")
    check(rc == 0 and out == text + "\n", "the ids decode to the text: %r" %
          out)

print("%d checks, %d failures, %d message lists" %
      (checks, len(failures), len(cases)))
sys.exit(1 if failures else 0)
