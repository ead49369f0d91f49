// The calls Google's Node.js queue samples make, one case per process, for
// tests/test_spanner_node.py. Usage: node queue.js <case> '<json arguments>'.
// SPANNER_EMULATOR_HOST points the client at spanq; SPANQ_PROJECT, SPANQ_INSTANCE
// and SPANQ_DATABASE name the database. Each case prints one JSON line on stdout
// (the worker case one per message); a Spanner error is printed as
// {"error": {"code": ..., "details": ...}} and the process exits 0, so the test
// asserts on it like any other answer.
'use strict';

const {Spanner, MutationSet} = require('@google-cloud/spanner');

const projectId = process.env.SPANQ_PROJECT;
const instanceId = process.env.SPANQ_INSTANCE;
const databaseId = process.env.SPANQ_DATABASE;

const spanner = new Spanner({projectId});
const instance = spanner.instance(instanceId);
const database = instance.database(databaseId);

const print = value => process.stdout.write(JSON.stringify(value) + '\n');
const rowsOf = rows => rows.map(row => row.toJSON());

const cases = {
  // The samples' fixture: an instance if there is none, a database created with
  // its queue DDL through the admin client, then more DDL (UpdateDatabaseDdl).
  async create({ddl, more}) {
    const [exists] = await instance.exists();
    const instances = spanner.getInstanceAdminClient();
    if (!exists) {
      const [operation] = await instances.createInstance({
        parent: instances.projectPath(projectId),
        instanceId,
        instance: {
          config: instances.instanceConfigPath(projectId, 'emulator-config'),
          displayName: 'spanq node tests',
          nodeCount: 1,
        },
      });
      await operation.promise();
    }
    const admin = spanner.getDatabaseAdminClient();
    const [created] = await admin.createDatabase({
      createStatement: 'CREATE DATABASE `' + databaseId + '`',
      extraStatements: ddl,
      parent: admin.instancePath(projectId, instanceId),
    });
    await created.promise();
    if (more) {
      const [updated] = await database.updateSchema(more);
      await updated.promise();
    }
    const [statements] = await database.getSchema();
    return {instanceExisted: exists, statements};
  },

  // The samples' teardown: every database dropped, the backups listed, the
  // instance deleted.
  async teardown() {
    const [databases] = await instance.getDatabases();
    const dropped = [];
    for (const each of databases) {
      await each.delete();
      dropped.push(each.formattedName_.split('/').pop());
    }
    const [backups] = await instance.getBackups();
    await instance.delete();
    const [after] = await spanner.getInstances();
    return {dropped, backups: backups.length, instances: after.length};
  },

  // transaction.queueSend in a read-write transaction; deliverIn (seconds) sets
  // a deliverTime, as the "in future" sample does.
  async send({queue, messages}) {
    await database.runTransactionAsync(async transaction => {
      for (const {key, payload, deliverIn, bytes} of messages) {
        const options = {payload: bytes ? Buffer.from(payload) : payload};
        if (deliverIn !== undefined) {
          options.deliverTime = new Date(Date.now() + deliverIn * 1000);
        }
        transaction.queueSend(queue, key, options);
      }
      await transaction.commit();
    });
    return {sent: messages.length};
  },

  // The same mutations outside a transaction: a MutationSet written at least once.
  async sendAtLeastOnce({queue, messages}) {
    const mutations = new MutationSet();
    for (const {key, payload} of messages) {
      mutations.queueSend(queue, key, {payload});
    }
    const [response] = await database.writeAtLeastOnce(mutations);
    return {committed: Boolean(response.commitTimestamp)};
  },

  // DML in a read-write transaction: runUpdate with parameters, the row count.
  async dml({statements}) {
    const counts = [];
    await database.runTransactionAsync(async transaction => {
      for (const {sql, params} of statements) {
        const [count] = await transaction.runUpdate({sql, params});
        counts.push(count);
      }
      await transaction.commit();
    });
    return {counts};
  },

  // transaction.queueAck; ignoreNotFound as the mutation's option.
  async ack({queue, keys, ignoreNotFound}) {
    await database.runTransactionAsync(async transaction => {
      for (const key of keys) {
        transaction.queueAck(queue, key, ignoreNotFound ? {ignoreNotFound} : undefined);
      }
      await transaction.commit();
    });
    return {acked: keys.length};
  },

  // database.run: a single-use read-only query whose rows come back once the
  // stream ends (for RECEIVE, after max_duration), as the receive sample reads.
  async query({sql, params}) {
    const [rows] = await database.run({sql, params});
    return {rows: rowsOf(rows)};
  },

  // A worker: database.runStream, each row printed as it arrives. It exits after
  // `want` rows: destroying the stream that runStream returns does not cancel
  // the call (client 9.1), so a worker that has what it wants ends the process.
  async worker({sql, want}) {
    print({streaming: true});
    let got = 0;
    for await (const row of database.runStream({sql})) {
      print({row: row.toJSON()});
      if (++got === want) {
        process.exit(0);
      }
    }
    return {ended: got};
  },

  // RENEWLEASE in a read-write transaction, tokens as an array parameter (the
  // client infers ARRAY<STRING>).
  async renew({queue, tokens}) {
    let rows;
    await database.runTransactionAsync(async transaction => {
      [rows] = await transaction.run({
        sql: `SELECT * FROM RENEWLEASE_${queue}(lease_tokens => @tokens)`,
        params: {tokens},
      });
      await transaction.commit();
    });
    return {rows: rowsOf(rows)};
  },
};

async function main() {
  const [name, json] = process.argv.slice(2);
  const run = cases[name];
  if (!run) {
    throw new Error(`no case ${name}; cases: ${Object.keys(cases).join(', ')}`);
  }
  try {
    print(await run(JSON.parse(json || '{}')));
  } catch (err) {
    if (typeof err.code !== 'number') {
      throw err;
    }
    print({error: {code: err.code, details: err.details}});
  } finally {
    await database.close();
    spanner.close();
  }
}

main().catch(err => {
  console.error(err);
  process.exit(1);
});
