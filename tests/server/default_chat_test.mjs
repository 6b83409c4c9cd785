// The default model (docs/default-model.md) chats through g4 serve and the official `openai` npm
// client: greedy answers end their turn by themselves (finish_reason "stop"), streaming and not,
// over a multi-turn conversation. The expected answers are the PyTorch model's own greedy
// exchanges, saved at export in models/default/reference.json ("chat").
//   node tests/server/default_chat_test.mjs        (G4_BINARY_DIR, G4_ASSETS optional)
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { assets, haveBinary, run, skipUnless, sourceDir, startServer, test, g4 } from './harness.mjs';

const clientPath = path.join(assets, 'npm/node_modules/openai/package.json');
const model = path.join(assets, 'models/default');
skipUnless(existsSync(clientPath), `the openai npm package is not installed (${clientPath}); run tools/setup.sh`);
skipUnless(existsSync(path.join(model, 'model.safetensors')), `no default model at ${model}; run tools/setup.sh`);
skipUnless(haveBinary(), `no g4 binary at ${g4}`);
const OpenAI = createRequire(clientPath)('openai');

const ref = JSON.parse(readFileSync(path.join(sourceDir, 'models/default/reference.json'), 'utf8'));
// Conversations: consecutive "chat" entries, a new one at each turn 0.
const conversations = [];
for (const c of ref.chat) {
  if (c.turn === 0) conversations.push([]);
  conversations.at(-1).push(c);
}

const server = await startServer(model, ['--parallel', '2', '--ctx', '512']);
const client = new OpenAI({ baseURL: server.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const greedy = { temperature: 0, max_tokens: 80 };

test('each answer of each conversation ends its turn (finish_reason stop) with the PyTorch text', async () => {
  for (const conv of conversations) {
    const messages = [];
    for (const c of conv) {
      messages.push({ role: 'user', content: c.question });
      const r = await client.chat.completions.create({ model: 'default', messages, ...greedy });
      const choice = r.choices[0];
      assert.equal(choice.finish_reason, 'stop', `${c.question} -> ${choice.message.content}`);
      assert.equal(choice.message.content, c.greedy_text, c.question);
      // greedy_ids hold the answer and its closing <turn|>, which is not counted as content
      assert.equal(r.usage.completion_tokens, c.greedy_ids.length, c.question);
      assert.equal(r.usage.prompt_tokens, c.prompt_ids.length, c.question);
      messages.push({ role: 'assistant', content: choice.message.content });
    }
  }
});

test('streaming: the same answer, then finish_reason stop', async () => {
  const c = conversations[0][0];
  const stream = await client.chat.completions.create({
    model: 'default', messages: [{ role: 'user', content: c.question }], ...greedy, stream: true,
  });
  let text = '', finish = null;
  for await (const chunk of stream) {
    if (!chunk.choices.length) continue;
    text += chunk.choices[0].delta.content || '';
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(finish, 'stop');
  assert.equal(text, c.greedy_text);
});

await run('default model chat through the openai client');
