import { connect, type Socket } from "node:net";
import { describe, expect, it } from "vitest";
import { classifyAddress, EndpointPolicy, EndpointRefusedError } from "./endpoint-policy.js";

describe("classifyAddress", () => {
  it.each([
    ["127.0.0.1", "loopback"],
    ["127.255.0.9", "loopback"],
    ["::1", "loopback"],
    ["[::1]", "loopback"],
    ["::ffff:127.0.0.1", "loopback"],
    ["[::ffff:7f00:1]", "loopback"],
    ["::127.0.0.1", "loopback"],
    ["64:ff9b::7f00:1", "loopback"],
    ["2002:7f00:1::", "loopback"],
    ["10.1.2.3", "private"],
    ["172.16.0.1", "private"],
    ["172.31.255.255", "private"],
    ["192.168.1.1", "private"],
    ["100.64.0.1", "private"],
    ["100.127.255.254", "private"],
    ["fc00::1", "private"],
    ["fd12:3456::1", "private"],
    ["::ffff:10.0.0.1", "private"],
    ["::ffff:a00:1", "private"],
    ["169.254.1.1", "link_local"],
    ["fe80::1", "link_local"],
    ["febf::1", "link_local"],
    ["169.254.169.254", "metadata"],
    ["::ffff:169.254.169.254", "metadata"],
    ["::ffff:a9fe:a9fe", "metadata"],
    ["fd00:ec2::254", "metadata"],
    ["100.100.100.200", "metadata"],
    ["0.0.0.0", "unspecified"],
    ["0.1.2.3", "unspecified"],
    ["::", "unspecified"],
    ["::ffff:0.0.0.0", "unspecified"],
    ["224.0.0.1", "multicast"],
    ["239.255.255.250", "multicast"],
    ["ff02::1", "multicast"],
    ["255.255.255.255", "broadcast"],
    ["240.0.0.1", "reserved"],
    ["192.0.2.10", "reserved"],
    ["2001:db8::1", "reserved"],
    ["not-an-ip", "reserved"],
    ["8.8.8.8", "public"],
    ["172.15.255.255", "public"],
    ["172.32.0.0", "public"],
    ["100.63.255.255", "public"],
    ["100.128.0.0", "public"],
    ["169.255.0.1", "public"],
    ["2606:4700::1111", "public"],
    ["::ffff:8.8.8.8", "public"],
  ])("%s is %s", (address, expected) => {
    expect(classifyAddress(address)).toBe(expected);
  });
});

/** Resolves every name to the given addresses, as a DNS server under test would. */
const resolvingTo =
  (...addresses: string[]) =>
  async () =>
    addresses.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));

async function refusal(policy: EndpointPolicy, url: string): Promise<string | undefined> {
  try {
    await policy.checkUrl(url);
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(EndpointRefusedError);
    return (err as EndpointRefusedError).message;
  }
}

describe("EndpointPolicy.checkUrl", () => {
  const strict = new EndpointPolicy("", { resolve: resolvingTo("93.184.216.34") });

  it.each([
    "http://127.0.0.1:11434/v1",
    "http://127.1/v1",
    "http://0x7f000001/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://127.0.0.1./",
    "http://[::1]:8080/",
    "http://[::ffff:127.0.0.1]/",
    "http://[0:0:0:0:0:ffff:7f00:1]/",
    "http://localhost:11434/v1",
    "http://LOCALHOST./",
    "http://api.localhost/",
    "http://10.0.0.5/v1",
    "http://[fd00:ec2::254]/",
    "http://169.254.169.254/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata.google.internal./",
    "http://0.0.0.0:8080/",
    "http://[::]/",
    "http://255.255.255.255/",
    "http://224.0.0.1/",
  ])("refuses %s by default", async (url) => {
    expect(await refusal(strict, url)).toMatch(/endpoint policy refuses/);
  });

  it("accepts public addresses and names that resolve to them", async () => {
    expect(await refusal(strict, "https://api.openai.com/v1")).toBeUndefined();
    expect(await refusal(strict, "http://8.8.8.8/v1")).toBeUndefined();
    expect(await refusal(strict, "http://[2606:4700::1111]/")).toBeUndefined();
  });

  it("names the reason, never the address a name resolved to", async () => {
    const policy = new EndpointPolicy("", { resolve: resolvingTo("8.8.8.8", "10.20.30.40") });
    const message = await refusal(policy, "https://models.example.com/v1");
    expect(message).toContain("models.example.com resolves to a private address");
    expect(message).not.toContain("10.20.30.40");
    expect(await refusal(strict, "http://10.0.0.5/")).toContain("10.0.0.5 is a private address");
    expect(await refusal(strict, "http://169.254.169.254/")).toContain("a metadata address");
  });

  it("refuses what is not an http(s) URL", async () => {
    expect(await refusal(strict, "not a url")).toMatch(/not a URL/);
    expect(await refusal(strict, "file:///etc/passwd")).toMatch(/http or https/);
    expect(await refusal(strict, "ftp://8.8.8.8/")).toMatch(/http or https/);
  });

  it("passes a name that does not resolve now (the connection is checked again)", async () => {
    const policy = new EndpointPolicy("", {
      resolve: () => Promise.reject(Object.assign(new Error("nope"), { code: "ENOTFOUND" })),
    });
    expect(await refusal(policy, "https://not-yet.example.com/")).toBeUndefined();
  });

  it("allows what the allow list names: class, IP, CIDR, host name", async () => {
    const policy = new EndpointPolicy("loopback, 10.1.0.0/16,192.168.7.7 , ollama.internal", {
      resolve: async (host) => [
        host === "localhost"
          ? { address: "127.0.0.1", family: 4 }
          : { address: "172.20.0.9", family: 4 },
      ],
    });
    expect(await refusal(policy, "http://localhost:11434/v1")).toBeUndefined();
    expect(await refusal(policy, "http://[::ffff:127.0.0.1]/")).toBeUndefined();
    expect(await refusal(policy, "http://10.1.200.3/")).toBeUndefined();
    expect(await refusal(policy, "http://[::ffff:10.1.200.3]/")).toBeUndefined();
    expect(await refusal(policy, "http://192.168.7.7/")).toBeUndefined();
    expect(await refusal(policy, "http://ollama.internal./v1")).toBeUndefined();
    expect(await refusal(policy, "http://10.2.0.1/")).toMatch(/private/);
    expect(await refusal(policy, "http://192.168.7.8/")).toMatch(/private/);
    expect(await refusal(policy, "http://other.internal/")).toMatch(/resolves to a private/);
    expect(await refusal(policy, "http://169.254.169.254/")).toMatch(/metadata/);
  });

  it("rejects an allow list entry it cannot read", () => {
    expect(() => new EndpointPolicy("10.0.0.0/33")).toThrow(/CIDR/);
    expect(() => new EndpointPolicy("http://x")).toThrow(/PIES_ALLOWED_ENDPOINTS/);
    expect(() => new EndpointPolicy("10.0.0.0/8/1")).toThrow(/CIDR/);
  });
});

describe("EndpointPolicy.lookup", () => {
  function tryConnect(policy: EndpointPolicy, host: string): Promise<Error | undefined> {
    return new Promise((resolve) => {
      // Port 9 (discard): nothing listens; a refused lookup fails before any connection attempt.
      const socket: Socket = connect({ host, port: 9, lookup: policy.lookup });
      socket.on("error", (err) => resolve(err));
      socket.on("connect", () => {
        socket.destroy();
        resolve(undefined);
      });
    });
  }

  it("refuses a connection to a name that resolves to loopback", async () => {
    const err = await tryConnect(new EndpointPolicy(""), "localhost");
    expect(err).toBeInstanceOf(EndpointRefusedError);
  });

  it("refuses a name whose addresses changed to a refused one since it was checked", async () => {
    // DNS rebinding: the name passed when the environment was saved, it now resolves to loopback.
    let answer = "93.184.216.34";
    const policy = new EndpointPolicy("", {
      resolve: async () => [{ address: answer, family: 4 }],
    });
    await policy.checkUrl("http://rebind.example.com/");
    answer = "127.0.0.1";
    const err = await tryConnect(policy, "rebind.example.com");
    expect(err).toBeInstanceOf(EndpointRefusedError);
    expect(err!.message).toContain("resolves to a loopback address");
  });

  it("lets it through when loopback is allowed (the connection then fails on its own)", async () => {
    const err = await tryConnect(new EndpointPolicy("loopback"), "localhost");
    expect(err).not.toBeInstanceOf(EndpointRefusedError);
    expect((err as NodeJS.ErrnoException | undefined)?.code).toBe("ECONNREFUSED");
  });
});
