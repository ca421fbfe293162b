// openai_sdk.mjs PORT KEY EXPECTED_CHAT EXPECTED_COMPLETION - the official
// OpenAI Node SDK (node_modules/openai) against a running vt serve: a chat
// completion non-streamed and streamed, a completion, and the models list.
// The expected texts are vt run's (--chat and plain, greedy, 24 tokens).
// Exit status 1 with a message on any difference.
import OpenAI from 'openai';

const [port, key, wantChat, wantCompletion] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });

function check(cond, what) {
  if (!cond) {
    console.error(`openai_sdk: ${what}`);
    process.exit(1);
  }
}
const messages = [{ role: 'user', content: 'What is a list?' }];

const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id.endsWith('.gguf'), `models: ${JSON.stringify(models.data)}`);

// non-streaming: vt run --chat prints the think block's text; here it is reasoning_content
const r = await client.chat.completions.create({ model: models.data[0].id, messages, max_tokens: 24, temperature: 0 });
const m = r.choices[0].message;
const got = (m.reasoning_content ?? '') + (m.content ?? '');
check(got === wantChat, `chat text ${JSON.stringify(got)} != vt run's ${JSON.stringify(wantChat)}`);
const n = r.usage.completion_tokens, fin = r.choices[0].finish_reason;
check(n >= 1 && n <= 24 && fin === (n === 24 ? 'length' : 'stop') &&
      r.usage.total_tokens === r.usage.prompt_tokens + n, `chat usage ${JSON.stringify(r.usage)} finish ${fin}`);

// streaming, with the usage chunk
const stream = await client.chat.completions.create({
  model: 'any', messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let text = '', finish = null, usage = null, chunks = 0;
for await (const ch of stream) {
  chunks++;
  if (ch.usage) usage = ch.usage;
  for (const c of ch.choices) {
    text += (c.delta.reasoning_content ?? '') + (c.delta.content ?? '');
    if (c.finish_reason) finish = c.finish_reason;
  }
}
check(text === wantChat, `streamed chat ${JSON.stringify(text)} != vt run's ${JSON.stringify(wantChat)}`);
check(finish === fin && usage && usage.completion_tokens === n && usage.prompt_tokens === r.usage.prompt_tokens,
      `streamed finish ${finish} usage ${JSON.stringify(usage)} (not streamed: ${fin} ${JSON.stringify(r.usage)})`);

const c = await client.completions.create({ model: 'any', prompt: 'The history of', max_tokens: 24, temperature: 0 });
check(c.choices[0].text === wantCompletion, `completion ${JSON.stringify(c.choices[0].text)} != ${JSON.stringify(wantCompletion)}`);

// a bad request is an APIError with the server's status and message
try {
  await client.chat.completions.create({ model: 'any', messages, max_tokens: -1 });
  check(false, 'max_tokens -1 was accepted');
} catch (e) {
  check(e.status === 400 && /max_tokens/.test(e.message), `bad request: ${e.status} ${e.message}`);
}
console.log(`openai_sdk: chat (plain and ${chunks} streamed chunks), completion, models, errors: ok`);
