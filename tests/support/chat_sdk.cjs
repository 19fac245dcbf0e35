// chat_sdk.cjs — the official OpenAI Node SDK against `inkling serve` on the bundled model
// (test_e2e_chat.c). usage: node chat_sdk.cjs OPENAI_MODULE_DIR BASE_URL
// Prints one JSON object with what the SDK got; the C test asserts on it.
const [mod, baseURL] = process.argv.slice(2);
const OpenAI = require(mod).default || require(mod);

async function collect(stream) {
  let text = '', reasoning = '', usage = null, finish = null, chunks = 0, roles = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    const d = c.delta || {};
    if (d.role) roles++;
    if (d.content) text += d.content;
    if (c.text) text += c.text;
    if (d.reasoning_content) reasoning += d.reasoning_content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, reasoning, usage, finish, chunks, roles };
}

async function main() {
  const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const out = {};
  const models = await client.models.list();
  const model = models.data[0].id;
  out.model = model;
  const messages = [{ role: 'user', content: 'Who was Moses?' }];
  const base = { model, messages, max_tokens: 24, temperature: 0 };

  // chat, non-stream and stream (usage in the last chunk), reasoning_effort accepted
  const whole = await client.chat.completions.create({ ...base, reasoning_effort: 'low' });
  out.whole = whole.choices[0].message.content;
  out.whole_role = whole.choices[0].message.role;
  out.whole_finish = whole.choices[0].finish_reason;
  out.whole_usage = whole.usage;
  const s = await collect(await client.chat.completions.create({
    ...base, reasoning_effort: 'low', stream: true, stream_options: { include_usage: true },
  }));
  out.streamed = s.text;
  out.streamed_finish = s.finish;
  out.streamed_usage = s.usage;
  out.streamed_roles = s.roles;
  // other effort names and a number are accepted; a bad one is a 400
  out.efforts_ok = true;
  for (const e of ['none', 'minimal', 'medium', 'high']) {
    const r = await client.chat.completions.create({ ...base, max_tokens: 2, reasoning_effort: e });
    if (!r.choices[0].message || typeof r.choices[0].message.content !== 'string') out.efforts_ok = false;
  }
  try {
    await client.chat.completions.create({ ...base, max_tokens: 2, reasoning_effort: 'extreme' });
    out.bad_effort_status = 200;
  } catch (e) {
    out.bad_effort_status = e.status;
  }
  // multi-turn: the assistant's earlier answer goes back in the history
  const turn2 = [...messages, { role: 'assistant', content: out.whole }, { role: 'user', content: 'And Aaron?' }];
  const w2 = await client.chat.completions.create({ ...base, messages: turn2 });
  const s2 = await collect(await client.chat.completions.create({ ...base, messages: turn2, stream: true }));
  out.turn2_whole = w2.choices[0].message.content;
  out.turn2_streamed = s2.text;
  out.turn2_prompt_tokens = w2.usage.prompt_tokens;
  // a system message
  const ws = await client.chat.completions.create({
    ...base, messages: [{ role: 'system', content: 'Answer in the words of the King James Bible.' }, ...messages],
  });
  out.system_prompt_tokens = ws.usage.prompt_tokens;

  // completions, non-stream and stream (with usage)
  const cbase = { model, prompt: 'In the beginning God created', max_tokens: 12, temperature: 0 };
  const comp = await client.completions.create(cbase);
  out.completion = comp.choices[0].text;
  out.completion_usage = comp.usage;
  const cs = await collect(await client.completions.create({ ...cbase, stream: true, stream_options: { include_usage: true } }));
  out.completion_streamed = cs.text;
  out.completion_streamed_usage = cs.usage;
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + '\n');
  process.exit(1);
});
