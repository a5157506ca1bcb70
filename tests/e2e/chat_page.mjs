// The chat page at GET / in headless Chromium on a phone-sized screen, against
// the real `tessera serve --api-key`: the page loads without the key and asks
// for it; typed messages get streamed replies equal to the API's greedy text;
// the history goes back with each turn; model and user text are escaped; the
// tokens/s come from the final chunk's timings; Stop ends a reply and frees
// the server's slot; a refused request gives the text back with the error.
import { chromium } from 'playwright-core';
import { check, env, kClose, metric, waitFor, withServer } from './server.mjs';

const kKey = 'sekret';
const kMaxTokens = 32;

// The API's own answer to `messages`, greedy, for comparison with the page.
async function direct(server, messages, extra = {}) {
  const r = await fetch(`${server.base}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...kClose, 'Content-Type': 'application/json', Authorization: `Bearer ${kKey}` },
    body: JSON.stringify({ messages, max_tokens: kMaxTokens, temperature: 0, ...extra }),
  });
  if (r.status !== 200) throw new Error(`direct request: HTTP ${r.status}: ${await r.text()}`);
  return r.json();
}

// Types `text`, presses Enter and returns the request the page sent.
async function typeAndSend(page, text) {
  const request = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions') && r.method() === 'POST');
  await page.locator('#input').pressSequentially(text);
  await page.locator('#input').press('Enter');
  return request;
}

// The n-th assistant reply once it has finished: {text, stats, finish}.
async function reply(page, n) {
  const el = page.locator('.msg.assistant').nth(n);
  await el.and(page.locator('[data-finish]')).waitFor({ timeout: 20000 });
  return {
    text: await el.locator('.text').textContent(),
    stats: await el.locator('.stats').textContent(),
    finish: await el.getAttribute('data-finish'),
  };
}

function sse(chunks) {
  return chunks.map((c) => (typeof c === 'string' ? c : `data: ${JSON.stringify(c)}\n\n`)).join('');
}

await withServer(['-np', '2', '-c', '8192', '-t', '2', '--api-key', kKey], async (server) => {
  // GET / needs no key and is the page, with a policy that forbids loading anything from elsewhere.
  const raw = await fetch(`${server.base}/`, { headers: kClose });
  check(raw.status === 200, `GET /: HTTP ${raw.status}`);
  check(/^text\/html/.test(raw.headers.get('content-type')), `GET /: content-type ${raw.headers.get('content-type')}`);
  check(/default-src 'none'/.test(raw.headers.get('content-security-policy') ?? ''), 'GET /: no Content-Security-Policy');
  check((await raw.text()).includes('<title>tessera chat</title>'), 'GET /: not the chat page');

  const browser = await chromium.launch({ executablePath: env('CHROMIUM'), headless: true });
  const problems = [];
  try {
    const context = await browser.newContext({
      viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true,
    });
    const page = await context.newPage();
    page.on('pageerror', (e) => problems.push(`uncaught in the page: ${e.message}`));
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) problems.push(`CSP violation: ${m.text()}`);
    });
    page.on('request', (r) => {
      const url = r.url();
      if (!url.startsWith(server.base) && !url.startsWith('data:')) problems.push(`request to elsewhere: ${url}`);
    });

    // Without the key the page loads, says why the model list failed, and opens the settings.
    await page.goto(`${server.base}/`);
    check((await page.title()) === 'tessera chat', `title ${await page.title()}`);
    await page.locator('#error').filter({ hasText: 'HTTP 401' }).waitFor({ timeout: 5000 });
    check(await page.locator('#settings').evaluate((d) => d.open), 'the settings did not open on a 401');

    // Phone-sized: nothing scrolls sideways and the composer is on screen.
    const layout = await page.evaluate(() => ({
      scrollWidth: document.documentElement.scrollWidth,
      width: window.innerWidth,
      height: window.innerHeight,
      composer: document.getElementById('composer').getBoundingClientRect().toJSON(),
    }));
    check(layout.scrollWidth <= layout.width, `the page is ${layout.scrollWidth} px wide on a ${layout.width} px screen`);
    check(layout.composer.bottom <= layout.height + 0.5 && layout.composer.top > 0,
          `the composer is off screen: ${JSON.stringify(layout)}`);

    await page.locator('#api-key').fill(kKey);
    await page.locator('#api-key').press('Tab');  // change event: the models are asked again
    await page.locator('#model').filter({ hasText: 'stories260K.gguf' }).waitFor({ timeout: 5000 });
    check(await page.locator('#error').isHidden(), 'the error stayed after the right key');
    await page.locator('#temperature').fill('0');
    await page.locator('#max-tokens').fill(String(kMaxTokens));

    // Turn 1: streamed reply equals the API's greedy reply; tokens/s from timings.
    const sent1 = await typeAndSend(page, 'Once upon a time');
    const body1 = sent1.postDataJSON();
    check(body1.stream === true && body1.model === 'stories260K.gguf', `turn 1: stream ${body1.stream}, model ${body1.model}`);
    check(sent1.headers().authorization === `Bearer ${kKey}`, `turn 1: Authorization ${sent1.headers().authorization}`);
    check(JSON.stringify(body1.messages) === JSON.stringify([{ role: 'user', content: 'Once upon a time' }]),
          `turn 1: messages ${JSON.stringify(body1.messages)}`);
    const r1 = await reply(page, 0);
    const want1 = await direct(server, body1.messages);
    check(r1.text === want1.choices[0].message.content,
          `turn 1: the page shows ${JSON.stringify(r1.text)}, the API gives ${JSON.stringify(want1.choices[0].message.content)}`);
    const stats = /^(\d+) tokens? · (\d+\.\d) tok\/s/.exec(r1.stats);
    check(stats, `turn 1: stats ${JSON.stringify(r1.stats)}`);
    check(Number(stats[1]) === want1.usage.completion_tokens && Number(stats[2]) > 0,
          `turn 1: stats ${r1.stats}, the API generated ${want1.usage.completion_tokens} tokens`);
    check(await page.locator('#input').inputValue() === '', 'turn 1: the input was not cleared');
    console.log(`turn 1: ${JSON.stringify(r1.text)} [${r1.stats}]`);

    // Turn 2: the history goes back with the new message.
    const sent2 = await typeAndSend(page, 'And then?');
    const want2Messages = [
      { role: 'user', content: 'Once upon a time' },
      { role: 'assistant', content: r1.text },
      { role: 'user', content: 'And then?' },
    ];
    check(JSON.stringify(sent2.postDataJSON().messages) === JSON.stringify(want2Messages),
          `turn 2: messages ${JSON.stringify(sent2.postDataJSON().messages)}`);
    const r2 = await reply(page, 1);
    const want2 = await direct(server, want2Messages);
    check(r2.text === want2.choices[0].message.content,
          `turn 2: the page shows ${JSON.stringify(r2.text)}, the API gives ${JSON.stringify(want2.choices[0].message.content)}`);

    // Model text that looks like HTML stays text (the tiny model cannot write
    // it, so this one reply is a canned stream: split lines, a ping, timings).
    const evil = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>&amp;';
    const body = sse([
      { choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] },
      { choices: [{ index: 0, delta: { content: evil.slice(0, 9) }, finish_reason: null }] },
      ': ping\n\n',
      { choices: [{ index: 0, delta: { content: evil.slice(9) }, finish_reason: null }] },
      { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], timings: { predicted_n: 3, predicted_per_second: 123.45 } },
      'data: [DONE]\n\n',
    ]);
    await page.route('**/v1/chat/completions', (route) =>
      route.fulfill({ status: 200, contentType: 'text/event-stream', body }));
    await typeAndSend(page, '<b id="user-html">hi</b>');
    const r3 = await reply(page, 2);
    await page.unroute('**/v1/chat/completions');
    check(r3.text === evil, `escaping: the reply reads ${JSON.stringify(r3.text)}`);
    check(r3.stats === '3 tokens · 123.5 tok/s', `escaping: stats ${JSON.stringify(r3.stats)} (from the final chunk's timings)`);
    check(await page.locator('.msg.user').nth(2).locator('.text').textContent() === '<b id="user-html">hi</b>',
          'escaping: the user message does not read as typed');
    const injected = await page.evaluate(() => ({
      elements: document.querySelectorAll('#log img, #log script, #log b').length,
      pwned: window.__pwned,
    }));
    check(injected.elements === 0 && injected.pwned === undefined, `escaping: HTML became elements: ${JSON.stringify(injected)}`);

    // New chat empties the history.
    await page.locator('#new-chat').click();
    check(await page.locator('.msg').count() === 0, 'new chat: messages left');

    // Stop: a long reply (no EOS, many tokens) stopped after its first text
    // ends at once, is kept, and the server frees the slot.
    const cancelledBefore = await metric(server, 'tessera_requests_cancelled_total');
    await page.route('**/v1/chat/completions', (route) => {
      const b = route.request().postDataJSON();
      route.continue({ postData: JSON.stringify({ ...b, max_tokens: 3500, ignore_eos: true }) });
    });
    await typeAndSend(page, 'Tell a long story');
    await page.locator('#stop').waitFor({ state: 'visible', timeout: 5000 });
    await page.waitForFunction(() => document.querySelector('.msg.assistant .text')?.textContent.length > 0,
                               null, { polling: 'raf', timeout: 10000 });
    await page.locator('#stop').click();
    const r4 = await reply(page, 0);
    await page.unroute('**/v1/chat/completions');
    check(r4.finish === 'stopped' && /· stopped$/.test(r4.stats), `stop: finish ${r4.finish}, stats ${r4.stats}`);
    check(r4.text.length > 0, 'stop: the partial reply was dropped');
    check(await page.locator('#stop').isHidden() && await page.locator('#send').isEnabled(), 'stop: the page is still busy');
    await waitFor('the server to count the cancelled request',
                  async () => (await metric(server, 'tessera_requests_cancelled_total')) === cancelledBefore + 1);
    await waitFor('the slot to be freed', async () => (await metric(server, 'tessera_slots_busy')) === 0);
    const generated = await metric(server, 'tessera_generated_tokens_total');
    console.log(`stop: ${r4.text.length} characters kept [${r4.stats}]`);

    // The stopped reply stays in the history.
    const sent5 = await typeAndSend(page, 'The end.');
    check(JSON.stringify(sent5.postDataJSON().messages) === JSON.stringify([
      { role: 'user', content: 'Tell a long story' },
      { role: 'assistant', content: r4.text },
      { role: 'user', content: 'The end.' },
    ]), `after stop: messages ${JSON.stringify(sent5.postDataJSON().messages)}`);
    const r5 = await reply(page, 1);
    check(r5.finish === 'stop' || r5.finish === 'length', `after stop: finish ${r5.finish}`);
    check((await metric(server, 'tessera_generated_tokens_total')) - generated <= kMaxTokens,
          'after stop: the stopped request kept generating');

    // A refused request: the error is shown and the text is given back.
    await page.locator('#api-key').fill('wrong');
    await page.locator('#api-key').press('Tab');
    await page.locator('#error').filter({ hasText: 'HTTP 401' }).waitFor({ timeout: 5000 });
    await typeAndSend(page, 'Are you there?');
    await page.locator('#error').filter({ hasText: /HTTP 401: invalid or missing API key/ }).waitFor({ timeout: 5000 });
    await page.locator('#send').and(page.locator(':enabled')).waitFor({ timeout: 5000 });
    check(await page.locator('#input').inputValue() === 'Are you there?', 'refused: the text was not given back');
    check(await page.locator('.msg').count() === 4, `refused: ${await page.locator('.msg').count()} messages, expected the 4 before`);
  } catch (e) {
    // What the page showed, to tell a page bug from a server one.
    const state = await browser.contexts()[0]?.pages()[0]?.evaluate(() => ({
      error: document.getElementById('error').textContent,
      messages: [...document.querySelectorAll('.msg')].map((m) => `${m.className}: ${m.textContent}`),
    })).catch(() => null);
    console.error(`--- the page ---\n${JSON.stringify(state, null, 1)}`);
    throw e;
  } finally {
    await browser.close();
  }
  check(problems.length === 0, `the page misbehaved:\n  ${problems.join('\n  ')}`);
});
