// server_sdk.cjs — drives `inkling serve` with the official OpenAI Node SDK (test_server.c).
// usage: node server_sdk.cjs OPENAI_MODULE_DIR BASE_URL MODEL PROMPT MAX_TOKENS
// Prints one JSON object: whole / streamed chat text, usage, and checks of other endpoints.
const [mod, baseURL, model, prompt, maxTokens] = process.argv.slice(2);
const OpenAI = require(mod).default || require(mod);

async function main() {
  const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const out = {};
  const models = await client.models.list();
  out.models_ok = models.data.length === 1 && models.data[0].id === model;
  const messages = [{ role: 'user', content: prompt }];
  const max_tokens = Number(maxTokens);
  const whole = await client.chat.completions.create({ model, messages, max_tokens, temperature: 0 });
  out.whole = whole.choices[0].message.content;
  out.whole_finish = whole.choices[0].finish_reason;
  const stream = await client.chat.completions.create({
    model, messages, max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '', reasoning = '', usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.content) text += c.delta.content;
    if (c.delta.reasoning_content) reasoning += c.delta.reasoning_content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  out.streamed = text;
  out.streamed_reasoning = reasoning;
  out.streamed_finish = finish;
  out.usage_completion_tokens = usage ? usage.completion_tokens : -1;
  const comp = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
  let ctext = '';
  const cstream = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 4, temperature: 0, stream: true });
  for await (const chunk of cstream) ctext += chunk.choices[0] ? chunk.choices[0].text : '';
  out.completion_ok = typeof comp.choices[0].text === 'string' && ctext === comp.choices[0].text;
  try {
    await client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 1 });
    out.error_ok = false;
  } catch (e) {
    out.error_ok = e.status === 400 && /does not exist/.test(e.message);
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + '\n');
  process.exit(1);
});
