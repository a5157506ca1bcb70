'use strict';
// Structured output at temperature 1.5: for 30 JSON schemas, 20 seeds each,
// on stories260K and the qwen2 random-weight fixture, the text always parses
// as JSON and validates against its schema, checked by ajv (npm), not by
// tessera's own code. Every schema bounds its repetitions, so each output
// ends within the budget (an open-ended additionalProperties is a random walk
// a model at this temperature need not end; grammar_test covers it).
const test = require('node:test');
const assert = require('node:assert/strict');
const Ajv = require('ajv/dist/2020');
const addFormats = require('ajv-formats');
const { stories, archFixture } = require('./helpers.js');
const tessera = require('../lib/index.js');

const str = { type: 'string', maxLength: 12 };
const schemas = [
  { type: 'object', properties: { name: str }, required: ['name'] },
  { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'number' }, c: { type: 'boolean' }, d: { type: 'null' } }, required: ['a', 'b', 'c', 'd'] },
  { type: 'object', properties: { age: { type: 'integer', minimum: 0, maximum: 120 } }, required: ['age'] },
  { type: 'object', properties: { t: { type: 'integer', exclusiveMinimum: -50, exclusiveMaximum: 50 } }, required: ['t'] },
  { type: 'object', properties: { n: { type: 'integer', minimum: 1000 } }, required: ['n'] },
  { type: 'object', properties: { n: { type: 'integer', maximum: -7 } }, required: ['n'] },
  { type: 'array', items: { type: 'integer' }, minItems: 2, maxItems: 4 },
  { type: 'array', items: str, maxItems: 3 },
  { type: 'array', items: { enum: ['red', 'green', 'blue'] }, minItems: 1, maxItems: 8 },
  { type: 'array', prefixItems: [{ type: 'string', maxLength: 5 }, { type: 'integer' }], items: false },
  { enum: ['yes', 'no', 42, null, true] },
  { const: { kind: 'fixed', v: [1, 2] } },
  { type: 'object', properties: { kind: { const: 'point' }, x: { type: 'number' }, y: { type: 'number' } }, required: ['kind', 'x', 'y'] },
  { type: 'object', properties: { date: { type: 'string', format: 'date' } }, required: ['date'] },
  { type: 'object', properties: { at: { type: 'string', format: 'date-time' } }, required: ['at'] },
  { type: 'object', properties: { time: { type: 'string', format: 'time' } }, required: ['time'] },
  { type: 'object', properties: { id: { type: 'string', format: 'uuid' } }, required: ['id'] },
  { type: 'object', properties: { code: { type: 'string', minLength: 3, maxLength: 3 } }, required: ['code'] },
  { anyOf: [{ type: 'integer', minimum: 0, maximum: 9 }, { type: 'string', maxLength: 4 }] },
  { oneOf: [{ type: 'object', properties: { cat: str }, required: ['cat'], additionalProperties: false },
            { type: 'object', properties: { dog: str }, required: ['dog'], additionalProperties: false }] },
  { type: ['string', 'null'], maxLength: 6 },
  { type: 'object', properties: { person: { type: 'object', properties: { name: str, address: { type: 'object', properties: { city: str, zip: { type: 'string', minLength: 5, maxLength: 5 } }, required: ['city', 'zip'] } }, required: ['name', 'address'] } }, required: ['person'] },
  { type: 'object', properties: { matrix: { type: 'array', items: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 9 }, minItems: 2, maxItems: 2 }, minItems: 2, maxItems: 2 } }, required: ['matrix'] },
  { $defs: { item: { type: 'object', properties: { sku: str, qty: { type: 'integer', minimum: 1, maximum: 99 } }, required: ['sku', 'qty'] } },
    type: 'object', properties: { items: { type: 'array', items: { $ref: '#/$defs/item' }, minItems: 1, maxItems: 3 } }, required: ['items'] },
  { $defs: { node: { type: 'object', properties: { v: { type: 'integer', minimum: 0, maximum: 9 }, next: { anyOf: [{ $ref: '#/$defs/node' }, { type: 'null' }] } }, required: ['v', 'next'] } },
    $ref: '#/$defs/node' },
  { allOf: [{ type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] }, { type: 'object', properties: { b: str }, required: ['b'] }] },
  { type: 'object', properties: { opt1: str, opt2: { type: 'integer' }, opt3: { type: 'boolean' } } },
  { type: 'object', properties: { id: { type: 'integer' }, extra: { type: 'integer', minimum: 0, maximum: 5 } }, required: ['id'], additionalProperties: false },
  { type: 'object', properties: { flag: { type: 'boolean' }, note: { type: ['string', 'null'], maxLength: 8 } }, required: ['flag'], additionalProperties: false },
  { type: 'object', properties: { tags: { type: 'array', items: { type: 'string', maxLength: 6 }, maxItems: 2 }, score: { type: 'number' }, ok: { type: 'boolean' } }, required: ['tags', 'score', 'ok'] },
];

for (const [label, model] of [['stories260K', stories], ['qwen2 fixture', archFixture]]) {
  test(`30 schemas x 20 seeds at temperature 1.5 on ${label}: every output validates (ajv)`, async () => {
    assert.equal(schemas.length, 30);
    const ajv = new Ajv({ strict: false });
    addFormats(ajv);
    const ctx = await tessera.loadModel({ model, n_ctx: 8192, n_parallel: 4 });
    let valid = 0;
    try {
      for (const [i, schema] of schemas.entries()) {
        const validate = ajv.compile(schema);
        const runs = [];
        for (let seed = 1; seed <= 20; ++seed) {
          runs.push(ctx.parallel.queueCompletion({ prompt: 'Data:', n_predict: 1800, temperature: 1.5, top_k: 0, top_p: 1, min_p: 0, seed, json_schema: schema }).promise);
        }
        for (const [k, r] of (await Promise.all(runs)).entries()) {
          assert.equal(r.stopped_eos, true, `schema ${i} seed ${k + 1} ended by ${r.finish_reason}: ${r.text}`);
          let doc;
          assert.doesNotThrow(() => { doc = JSON.parse(r.text); }, `schema ${i} seed ${k + 1}: ${r.text}`);
          assert.ok(validate(doc), `schema ${i} seed ${k + 1}: ${r.text}\n${JSON.stringify(validate.errors)}`);
          ++valid;
        }
      }
    } finally {
      await ctx.release();
    }
    assert.equal(valid, 600);
  });
}
