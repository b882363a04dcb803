import net from "node:net";

/** A pooler that tests run in front of the real PostgreSQL; see startTransactionPooler. */
export interface TransactionPooler {
  /** The database's URL through the pooler. */
  url: string;
  stop(): Promise<void>;
}

/** Reads PostgreSQL protocol messages off a socket: `type` byte, int32 length, body. */
class Messages {
  private buffered = Buffer.alloc(0);
  private readonly ready: Buffer[] = [];
  private waiting: ((m: Buffer | undefined) => void) | undefined;
  private ended = false;

  constructor(
    socket: net.Socket,
    private typed: boolean,
  ) {
    socket.on("data", (chunk: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, chunk]);
      for (;;) {
        const at = this.typed ? 1 : 0;
        if (this.buffered.length < at + 4) break;
        const size = at + this.buffered.readInt32BE(at);
        if (this.buffered.length < size) break;
        this.ready.push(this.buffered.subarray(0, size));
        this.buffered = this.buffered.subarray(size);
        // Only the first message a client sends (its startup) has no type byte.
        this.typed = true;
      }
      this.wake();
    });
    const end = () => {
      this.ended = true;
      this.wake();
    };
    socket.on("close", end);
    socket.on("error", end);
  }

  private wake() {
    if (!this.waiting || (this.ready.length === 0 && !this.ended)) return;
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting(this.ready.shift());
  }

  /** The next message; undefined once the socket is closed. */
  next(): Promise<Buffer | undefined> {
    return new Promise((resolve) => {
      this.waiting = resolve;
      this.wake();
    });
  }
}

/**
 * A pooler in transaction mode in front of a database of the test server (`databaseUrl`), as PgBouncer's before 1.21 (or
 * 1.21+ without max_prepared_statements): each client connection is served by `servers` server
 * connections of its own, and each transaction (each run up to a Sync or a simple Query that
 * leaves the server idle) goes to the next of them in turn, so a statement prepared in one
 * transaction is on another server connection than the next one's. Trust authentication only.
 */
export async function startTransactionPooler(
  databaseUrl: string,
  servers = 2,
): Promise<TransactionPooler> {
  const target = new URL(databaseUrl);
  const sockets = new Set<net.Socket>();
  const track = (s: net.Socket) => {
    sockets.add(s);
    s.setNoDelay(true);
    s.on("close", () => sockets.delete(s));
    s.on("error", () => s.destroy());
    return s;
  };

  async function serve(client: net.Socket) {
    const fromClient = new Messages(client, false);
    const startup = await fromClient.next();
    if (!startup) return;
    const backends = await Promise.all(
      Array.from({ length: servers }, async () => {
        const socket = track(
          net.connect({ host: target.hostname, port: Number(target.port || 5432) }),
        );
        const messages = new Messages(socket, true);
        socket.write(startup);
        const answer: Buffer[] = [];
        for (let m = await messages.next(); m; m = await messages.next()) {
          answer.push(m);
          if (m[0] === 0x5a /* Z: ReadyForQuery */) break;
        }
        return { socket, messages, answer, idle: true };
      }),
    );
    // The client sees the first server connection's startup.
    client.write(Buffer.concat(backends[0]!.answer));
    let current = 0;
    let group: Buffer[] = [];
    for (let m = await fromClient.next(); m; m = await fromClient.next()) {
      if (m[0] === 0x58 /* X: Terminate */) break;
      group.push(m);
      // A Sync or a simple Query ends what the server answers with one ReadyForQuery.
      if (m[0] !== 0x53 && m[0] !== 0x51) continue;
      // A transaction stays on its server connection; one that begins anew goes to the next.
      if (backends[current]!.idle) current = (current + 1) % servers;
      const backend = backends[current]!;
      backend.socket.write(Buffer.concat(group));
      group = [];
      for (let r = await backend.messages.next(); r; r = await backend.messages.next()) {
        client.write(r);
        if (r[0] === 0x5a) {
          backend.idle = r[5] === 0x49; // "I"
          break;
        }
      }
    }
    client.end();
    for (const b of backends) b.socket.end();
  }

  const server = net.createServer((client) => {
    track(client);
    serve(client).catch(() => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = new URL(target);
  url.hostname = "127.0.0.1";
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.toString(),
    async stop() {
      const closed = new Promise((resolve) => server.close(resolve));
      for (const s of sockets) s.destroy();
      await closed;
    },
  };
}
