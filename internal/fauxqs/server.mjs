// Starts the fauxqs SQS/SNS emulator on 127.0.0.1 only (its own CLI binds
// 0.0.0.0). Usage: node server.mjs PORT. It prints "fauxqs listening on
// 127.0.0.1:PORT" once it accepts connections and exits on SIGTERM or SIGINT.
import { buildApp } from "fauxqs";

const port = Number.parseInt(process.argv[2] ?? process.env.FAUXQS_PORT ?? "", 10);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error("usage: node server.mjs PORT");
  process.exit(2);
}

const app = buildApp({ logger: false, defaultRegion: "us-east-1" });
await app.listen({ port, host: "127.0.0.1" });
console.log(`fauxqs listening on 127.0.0.1:${port}`);

const stop = async () => {
  await app.close();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
