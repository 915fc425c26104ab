// cac-tokenize against Hugging Face's tokenizers (the Rust library, as the
// npm package @anush008/tokenizers) on the real Qwen3 tokenizer.json, over
// real multilingual text: every translated string of the gettext catalogues
// (.mo files) under /usr/share/locale, each string's NFD form (which the NFC
// normalizer must bring back), and some of both between Qwen's chat markers
// and other added tokens. Ids must be equal line for line, and
// decoding cac's ids must give the NFC text back.
//
//   node compare-hf.js CAC_TOKENIZE DEPS_DIR [MAX_LINES]
//
// Exits 77 (skipped) when DEPS_DIR lacks the references that
// scripts/setup.sh installs.
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");

const [cacTokenize, deps, maxArg] = process.argv.slice(2);
const maxLines = Number(maxArg || 20000);
const folder = path.join(deps, "tokenizers/qwen3");
const hfModule = path.resolve(deps, "npm/node_modules/@anush008/tokenizers");
if (!fs.existsSync(path.join(folder, "tokenizer.json")) ||
    !fs.existsSync(hfModule)) {
  console.log(`skipped: no ${folder}/tokenizer.json or ${hfModule} ` +
              "(scripts/setup.sh installs them)");
  process.exit(77);
}
const { Tokenizer } = require(hfModule);

/// The translations (msgstr) of a GNU .mo catalogue.
function moStrings(file) {
  const b = fs.readFileSync(file);
  const magic = b.readUInt32LE(0);
  const read = magic === 0x950412de ? (o) => b.readUInt32LE(o)
             : magic === 0xde120495 ? (o) => b.readUInt32BE(o) : null;
  if (!read)
    return [];
  const n = read(8), table = read(16), out = [];
  for (let k = 1; k < n; ++k) { // entry 0 is the catalogue's header
    const len = read(table + 8 * k), off = read(table + 8 * k + 4);
    out.push(...b.toString("utf8", off, off + len).split("\0"));
  }
  return out;
}

function catalogues(dir) {
  const files = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".mo")) files.push(p);
    }
  };
  if (fs.existsSync(dir)) walk(dir);
  return files.sort();
}

async function main() {
  // Distinct lines, in a fixed order; spread over the catalogues so that
  // every language gets its share of a capped run.
  const seen = new Set(), perFile = [];
  for (const f of catalogues("/usr/share/locale")) {
    const lines = [];
    for (const s of moStrings(f))
      for (const line of s.split("\n"))
        if (line && !line.includes("\r") && !seen.has(line)) {
          seen.add(line);
          lines.push(line);
        }
    if (lines.length) perFile.push(lines);
  }
  const texts = [];
  for (let k = 0; texts.length < maxLines; ++k) {
    let any = false;
    for (const lines of perFile)
      if (k < lines.length && texts.length < maxLines) {
        texts.push(lines[k]);
        any = true;
      }
    if (!any) break;
  }
  if (texts.length < 100) {
    console.log(`FAILED: only ${texts.length} translated lines found under ` +
                "/usr/share/locale");
    process.exit(1);
  }
  // Each text, its NFD form where that differs, and every tenth text
  // between Qwen's chat markers and other added tokens (matched before
  // normalization, the text between them normalized on its own).
  const inputs = [];
  let nfdDiffers = 0, chat = 0;
  texts.forEach((t, k) => {
    inputs.push(t);
    const d = t.normalize("NFD");
    if (d !== t) {
      inputs.push(d);
      ++nfdDiffers;
    }
    if (k % 10 === 0) {
      inputs.push(`<|im_start|>user ${d}<|im_end|><|im_start|>assistant ` +
                  `<think></think>${t}<tool_call>${d}</tool_call><|im_end|>`);
      ++chat;
    }
  });
  const hf = Tokenizer.fromFile(path.join(folder, "tokenizer.json"));
  const ours = execFileSync(cacTokenize, [folder], {
    input: inputs.join("\n") + "\n", maxBuffer: 1 << 30 }).toString()
    .split("\n");
  const decoded = execFileSync(cacTokenize, [folder, "--decode"], {
    input: ours.slice(0, inputs.length).join("\n") + "\n",
    maxBuffer: 1 << 30 }).toString().split("\n");
  let failed = 0, nonNfc = 0;
  for (let k = 0; k < inputs.length; ++k) {
    const enc = await hf.encode(inputs[k], null, { addSpecialTokens: false });
    const want = JSON.stringify(Array.from(enc.getIds()));
    const nfc = inputs[k].normalize("NFC");
    if (nfc !== inputs[k]) ++nonNfc;
    let why = null;
    if (ours[k] !== want) why = `ids ${ours[k]}, Hugging Face ${want}`;
    else if (decoded[k] !== nfc) why = `decodes to ${JSON.stringify(decoded[k])}`;
    if (why && ++failed <= 20)
      console.log(`mismatch: ${JSON.stringify(inputs[k])}: ${why}`);
  }
  console.log(`${inputs.length} lines (${texts.length} translated, ` +
              `${nfdDiffers} NFD forms, ${chat} with chat markers; ` +
              `${nonNfc} not NFC) from ` +
              `${perFile.length} catalogues`);
  console.log(`${inputs.length - failed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
main().catch((e) => { console.log(`FAILED: ${e.stack}`); process.exit(1); });
