// openai_client.mjs - the official OpenAI Node client against the lab's server (base_url
// http://127.0.0.1:PORT/v1, the key in KEY): a completion, a chat completion, streams of both
// (their text equal to the whole responses' at temperature 0), usage in a stream's last
// chunk, the model list, a 400 naming an unserved field and a 404 for an unknown model. Run by tests/serve/openai.sh, which installs the `openai` package.
import OpenAI from 'openai';

const port = process.env.PORT;
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: process.env.KEY,
                            maxRetries: 0, timeout: 60000 });
const model = 'mlsys-lab';
let failed = 0;
function check(cond, what) {
    if (!cond) {
        console.error(`openai_client: FAILED: ${what}`);
        failed++;
    }
}

const c = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 24,
                                            temperature: 0 });
check(typeof c.choices[0].text === 'string' && c.choices[0].text.length > 0, 'completion text');
check(['stop', 'length'].includes(c.choices[0].finish_reason), 'completion finish_reason');
check(c.usage.total_tokens === c.usage.prompt_tokens + c.usage.completion_tokens, 'usage');

let text = '';
const cs = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 24,
                                             temperature: 0, stream: true });
for await (const chunk of cs)
    text += chunk.choices[0]?.text ?? '';
check(text === c.choices[0].text, `completion stream "${text}" != "${c.choices[0].text}"`);

const messages = [{ role: 'user', content: 'Tom had a dog' }];
const ch = await client.chat.completions.create({ model, messages, max_tokens: 20,
                                                  temperature: 0 });
check(ch.choices[0].message.role === 'assistant', 'chat role');
check(typeof ch.choices[0].message.content === 'string', 'chat content');

text = '';
let finish = null;
const st = await client.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0,
                                                  stream: true });
for await (const chunk of st) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
}
check(text === ch.choices[0].message.content, `chat stream "${text}" != whole`);
check(finish === ch.choices[0].finish_reason, 'chat stream finish_reason');

// stream_options.include_usage: the last chunk has no choices and the whole usage
let last = null;
const su = await client.chat.completions.create({ model, messages, max_tokens: 20,
                                                  temperature: 0, stream: true,
                                                  stream_options: { include_usage: true } });
for await (const chunk of su)
    last = chunk;
check(last && last.choices.length === 0 && last.usage &&
      last.usage.total_tokens === ch.usage.total_tokens, 'include_usage: last chunk');
check(ch.created >= Math.floor(Date.now() / 1000) - 60, `created ${ch.created} is not now`);

// a field the server does not serve is refused by name, never ignored
try {
    await client.completions.create({ model, prompt: 'x', max_tokens: 2, logprobs: 2 });
    check(false, 'logprobs was ignored');
} catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'logprobs', `logprobs: ${e}`);
}

const models = await client.models.list();
check(models.data.some((m) => m.id === model), 'models.list');

try {
    await client.completions.create({ model: 'nope', prompt: 'x', max_tokens: 2 });
    check(false, 'an unknown model was served');
} catch (e) {
    check(e instanceof OpenAI.NotFoundError && e.status === 404, `unknown model: ${e}`);
}

if (failed)
    process.exit(1);
console.log(`openai_client: ok (completion, chat, both streamed, usage chunk, models, 400, ` +
            `404): "${c.choices[0].text}"`);
