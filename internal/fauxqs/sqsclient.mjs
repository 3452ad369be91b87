// Runs one SQS API call with the AWS SDK for JavaScript v3
// (@aws-sdk/client-sqs), for Ferry's interop test: a client independent of
// Ferry's Go SDK that speaks SQS's JSON protocol.
// Usage: node sqsclient.mjs ENDPOINT REGION ACTION 'JSON input'
// It prints the call's output as JSON on stdout, or the error on stderr and
// exits 1. Credentials are dummies; the endpoint is the emulator.
import * as sqs from "@aws-sdk/client-sqs";

const [endpoint, region, action, input] = process.argv.slice(2);
const Command = sqs[`${action}Command`];
if (!endpoint || !region || !Command) {
  console.error("usage: node sqsclient.mjs ENDPOINT REGION ACTION 'JSON input'");
  process.exit(2);
}
const client = new sqs.SQSClient({
  endpoint,
  region,
  credentials: { accessKeyId: "test", secretAccessKey: "test" },
  maxAttempts: 1,
});
try {
  const out = await client.send(new Command(JSON.parse(input ?? "{}")));
  delete out.$metadata;
  console.log(JSON.stringify(out));
} catch (err) {
  console.error(`${err.name}: ${err.message}`);
  process.exit(1);
}
