// A loopback TCP proxy for the reconnect tests: it forwards to the server
// and cuts the first connection after some bytes came back, or every
// connection it carries when told to.

import net from "node:net";

/**
 * CuttingProxy forwards 127.0.0.1:<port> to target; the first connection is
 * reset after cutAfter bytes (never by default), and cut() resets every
 * connection carried at the moment.
 */
export class CuttingProxy {
  connections = 0;
  cuts = 0;
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();
  readonly #links = new Set<[net.Socket, net.Socket]>(); // [client side, server side] carried now

  private constructor(server: net.Server) {
    this.#server = server;
  }

  /** start listens on a free loopback port. */
  static async start(target: string, cutAfter = Infinity): Promise<CuttingProxy> {
    const [host, port] = splitHostPort(target);
    const server = net.createServer();
    const proxy = new CuttingProxy(server);
    server.on("connection", (down) => proxy.#pipe(down, host, port, cutAfter));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  /** address is host:port of the proxy. */
  get address(): string {
    const a = this.#server.address() as net.AddressInfo;
    return `127.0.0.1:${a.port}`;
  }

  /**
   * cut resets every connection the proxy carries now, both ways, as a
   * dropped network would; the proxy keeps listening, so a reconnect goes
   * through. It returns how many it cut.
   */
  cut(): number {
    const links = [...this.#links];
    this.#links.clear();
    for (const [down, up] of links) {
      this.cuts++;
      down.resetAndDestroy();
      up.resetAndDestroy();
    }
    return links.length;
  }

  #pipe(down: net.Socket, host: string, port: number, cutAfter: number): void {
    const first = ++this.connections === 1;
    const up = net.connect(port, host);
    const link: [net.Socket, net.Socket] = [down, up];
    this.#sockets.add(down).add(up);
    this.#links.add(link);
    let bytes = 0;
    up.on("data", (b: Buffer) => {
      down.write(b);
      bytes += b.length;
      if (first && bytes >= cutAfter && !down.destroyed) {
        this.cuts++;
        down.resetAndDestroy();
        up.destroy();
      }
    });
    down.on("data", (b: Buffer) => up.write(b));
    for (const [a, b] of [[up, down], [down, up]] as const) {
      a.on("error", () => b.destroy());
      a.on("close", () => {
        b.destroy();
        this.#sockets.delete(a);
        this.#links.delete(link);
      });
    }
  }

  /** close stops listening and closes every connection. */
  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

function splitHostPort(addr: string): [string, number] {
  const i = addr.lastIndexOf(":");
  return [addr.slice(0, i).replace(/^\[|\]$/g, ""), Number(addr.slice(i + 1))];
}
