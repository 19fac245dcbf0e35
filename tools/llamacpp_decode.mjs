// llamacpp_decode.mjs — one llama.cpp decode measurement for scripts/bench-llamacpp, through the
// prebuilt llama.cpp of the npm package node-llama-cpp (CPU only, never built from source).
//
// Loads MODEL.gguf, makes a context with exactly THREADS threads, evaluates the prompt ids, then
// times TOKENS - 1 single-token decode steps with greedy sampling (the first generated token comes
// from the prompt's forward, as in `inkling generate`, whose decode_tok_s counts the same steps).
// End-of-generation tokens do not stop it. Prints one JSON line on stdout.
//
// usage: node tools/llamacpp_decode.mjs --npm-dir DIR --model M.gguf --threads T --tokens N
//                                       [--prompt-ids 1,2,3] [--check]
//   --npm-dir  the folder whose node_modules holds node-llama-cpp (scripts/bench-llamacpp's cache)
//   --check    only load the library and print its build / CPU features
import path from "node:path";
import { pathToFileURL } from "node:url";

function parseArgs(argv) {
    const o = { threads: 1, tokens: 64, promptIds: "1,2,3,4,5,6,7,8", check: false };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i], v = () => {
            if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
            return argv[++i];
        };
        if (a === "--npm-dir") o.npmDir = v();
        else if (a === "--model") o.model = v();
        else if (a === "--threads") o.threads = Number(v());
        else if (a === "--tokens") o.tokens = Number(v());
        else if (a === "--prompt-ids") o.promptIds = v();
        else if (a === "--check") o.check = true;
        else throw new Error(`unknown argument ${a}`);
    }
    if (!o.npmDir) throw new Error("--npm-dir is required");
    if (!o.check && !o.model) throw new Error("--model is required");
    if (!(o.threads >= 1) || !(o.tokens >= 2)) throw new Error("--threads >= 1 and --tokens >= 2 required");
    return o;
}

const opt = parseArgs(process.argv.slice(2));
const entry = path.resolve(opt.npmDir, "node_modules", "node-llama-cpp", "dist", "index.js");
const { getLlama } = await import(pathToFileURL(entry).href);

// gpu: false and build: "never": the prebuilt CPU binary or an error, nothing is compiled or fetched.
// maxThreads: 0 lets a context use exactly the threads it asks for.
const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                               progressLogs: false, logLevel: "error", maxThreads: 0 });
const info = { build: llama.buildType, llama_cpp: llama.llamaCppRelease?.release ?? null,
               system_info: String(llama.systemInfo ?? "").trim() };
if (opt.check) {
    console.log(JSON.stringify({ ok: true, ...info }));
    await llama.dispose();
    process.exit(0);
}

const prompt = opt.promptIds.split(",").map(Number);
const model = await llama.loadModel({ modelPath: opt.model, gpuLayers: 0 });
const context = await model.createContext({ contextSize: Math.max(256, prompt.length + opt.tokens + 16),
                                            batchSize: 512, sequences: 1, flashAttention: false,
                                            threads: { ideal: opt.threads, min: opt.threads } });
const seq = context.getSequence();
const it = seq.evaluate(prompt, { temperature: 0, yieldEogToken: true });
const ids = [];
const t0 = process.hrtime.bigint();
let r = await it.next();               // prompt forward + first greedy token
const t1 = process.hrtime.bigint();
ids.push(r.value);
for (let i = 1; i < opt.tokens; i++) {  // one decode step (forward of the previous token) each
    r = await it.next();
    if (r.done) break;
    ids.push(r.value);
}
const t2 = process.hrtime.bigint();
await it.return();
const steps = ids.length - 1;
const decodeS = Number(t2 - t1) / 1e9, prefillS = Number(t1 - t0) / 1e9;
console.log(JSON.stringify({
    decode_tok_s: steps / decodeS, decode_s: decodeS, steps, prefill_s: prefillS, prompt_tokens: prompt.length,
    generated_tokens: ids.length, threads: context.currentThreads, first_ids: ids.slice(0, 8), ...info
}));
await context.dispose();
await model.dispose();
await llama.dispose();
