// tool_calls.mjs PORT KEY - the official OpenAI Node SDK through a tool-calling
// round trip against vt serve (issue 45): the server runs with the Qwen3.5
// chat template and the test setting VT_TEST_FORCE_OUTPUT, so the model's
// answer is a known tool call (openai_node.sh). The call must come back
// parsed, not streamed and streamed, with arguments that are JSON of the
// tool's schema types; then the call and its result, sent back as history,
// must be accepted and rendered by the template (POST /apply-template).
// Exit status 1 with a message on any difference.
import OpenAI from 'openai';

const [port, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });

function check(cond, what) {
  if (!cond) {
    console.error(`tool_calls: ${what}`);
    process.exit(1);
  }
}
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather of a city',
    parameters: {
      type: 'object', required: ['city'],
      properties: { city: { type: 'string' }, days: { type: 'integer' }, zip: { type: 'string' } },
    },
  },
}];
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

function checkCall(calls, how) {
  check(Array.isArray(calls) && calls.length === 1, `${how}: tool_calls ${JSON.stringify(calls)}`);
  const c = calls[0];
  check(c.type === 'function' && typeof c.id === 'string' && c.id.length > 0, `${how}: call ${JSON.stringify(c)}`);
  check(c.function.name === 'get_weather', `${how}: name ${c.function.name}`);
  const args = JSON.parse(c.function.arguments); // valid JSON or this throws
  // typed by the schema: days an integer, zip a string although it reads as a number
  check(args.city === 'Paris' && args.days === 3 && args.zip === '75001' && Object.keys(args).length === 3,
        `${how}: arguments ${c.function.arguments}`);
}

// not streamed
const r = await client.chat.completions.create({ model: 'any', messages, tools, tool_choice: 'auto' });
const m = r.choices[0].message;
check(r.choices[0].finish_reason === 'tool_calls', `finish_reason ${r.choices[0].finish_reason}`);
check(m.content === 'I will look it up.', `content ${JSON.stringify(m.content)}`);
check(m.reasoning_content === 'The user asks about Paris.\n', `reasoning ${JSON.stringify(m.reasoning_content)}`);
checkCall(m.tool_calls, 'not streamed');

// streamed: the calls gathered from delta.tool_calls by index
const stream = await client.chat.completions.create({ model: 'any', messages, tools, stream: true });
const calls = [];
let content = '', finish = null;
for await (const ch of stream) {
  for (const c of ch.choices) {
    content += c.delta.content ?? '';
    for (const d of c.delta.tool_calls ?? []) {
      const t = calls[d.index] ??= { id: '', type: '', function: { name: '', arguments: '' } };
      if (d.id) t.id += d.id;
      if (d.type) t.type = d.type;
      t.function.name += d.function?.name ?? '';
      t.function.arguments += d.function?.arguments ?? '';
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
}
check(finish === 'tool_calls', `streamed finish_reason ${finish}`);
check(content === 'I will look it up.', `streamed content ${JSON.stringify(content)}`);
checkCall(calls, 'streamed');

// the call and its result back as history: accepted, and rendered by the template
const history = [...messages, m, { role: 'tool', tool_call_id: m.tool_calls[0].id, content: 'sunny, 21 C' }];
const r2 = await client.chat.completions.create({ model: 'any', messages: history, tools });
check(r2.choices[0].message.tool_calls?.length === 1, `second turn: ${JSON.stringify(r2.choices[0])}`);
check(r2.usage.prompt_tokens > r.usage.prompt_tokens, `second turn prompt ${r2.usage.prompt_tokens} tokens`);
const res = await fetch(`http://127.0.0.1:${port}/apply-template`, {
  method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
  body: JSON.stringify({ messages: history, tools }),
});
check(res.status === 200, `/apply-template: ${res.status}`);
const { prompt } = await res.json();
for (const want of ['"name": "get_weather"', '<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>',
                    '<tool_response>\nsunny, 21 C\n</tool_response>'])
  check(prompt.includes(want), `the rendered prompt lacks ${JSON.stringify(want)}:\n${prompt}`);

// tool_choice "none": the call stays text
const r3 = await client.chat.completions.create({ model: 'any', messages, tools, tool_choice: 'none' });
check(r3.choices[0].finish_reason === 'stop' && !r3.choices[0].message.tool_calls &&
      r3.choices[0].message.content.includes('<tool_call>'), `tool_choice none: ${JSON.stringify(r3.choices[0])}`);
console.log('tool_calls: parsed (plain and streamed), typed, sent back and rendered: ok');
