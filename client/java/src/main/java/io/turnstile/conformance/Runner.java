package io.turnstile.conformance;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.turnstile.client.AcquireOptions;
import io.turnstile.client.Contender;
import io.turnstile.client.Hold;
import io.turnstile.client.HoldState;
import io.turnstile.client.LockDescription;
import io.turnstile.client.LockKind;
import io.turnstile.client.TokenCheck;
import io.turnstile.client.TurnstileClient;
import io.turnstile.client.TurnstileException;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * The conformance runner of the Java client (issue 22): reads commands (JSON
 * lines) on stdin, drives io.turnstile.client and writes events (JSON lines)
 * on stdout; the protocol is in tests/conformance/README.md. Each acquire
 * runs on a thread of its own, which then reports the hold's state changes.
 *
 * <pre>java -cp CLASSES:JARS io.turnstile.conformance.Runner --server TARGET --owner NAME</pre>
 */
public final class Runner {
  private static final Gson GSON = new Gson();
  private static final PrintStream OUT =
      new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false,
          StandardCharsets.UTF_8);

  private final TurnstileClient client;
  private final String owner;
  private final Map<String, Hold> holds = new ConcurrentHashMap<>();

  Runner(TurnstileClient client, String owner) {
    this.client = client;
    this.owner = owner;
  }

  static void say(JsonObject o) {
    String line = GSON.toJson(o);
    synchronized (OUT) {
      OUT.print(line);
      OUT.print('\n');
      OUT.flush();
    }
  }

  static JsonObject holdEvent(String hold, String event) {
    JsonObject o = new JsonObject();
    o.addProperty("hold", hold);
    o.addProperty("event", event);
    return o;
  }

  static String str(JsonObject c, String key, String dflt) {
    JsonElement e = c.get(key);
    return e == null || e.isJsonNull() ? dflt : e.getAsString();
  }

  static long num(JsonObject c, String key, long dflt) {
    JsonElement e = c.get(key);
    return e == null || e.isJsonNull() ? dflt : e.getAsLong();
  }

  static String codeName(RuntimeException e) {
    if (e instanceof TurnstileException) {
      return ((TurnstileException) e).getCode().name();
    }
    if (e instanceof IllegalArgumentException) {
      return "INVALID_ARGUMENT";  // refused by the options' own checks
    }
    return "UNKNOWN";
  }

  void acquire(JsonObject cmd) {
    String hold = str(cmd, "hold", "");
    Hold h;
    try {
      AcquireOptions.Builder b = AcquireOptions.builder()
          .waitTimeout(Duration.ofMillis(num(cmd, "wait_ms", 10000)))
          .ttl(Duration.ofMillis(num(cmd, "ttl_ms", 0)))
          .owner(str(cmd, "owner", ""))
          .lockDelay(Duration.ofMillis(num(cmd, "lock_delay_ms", 0)))
          .revokeReason(str(cmd, "revoke_reason", ""))
          .onQueued(position -> {
            JsonObject o = holdEvent(hold, "queued");
            o.addProperty("position", position);
            say(o);
          })
          .onRevokeRequested((hd, requester, reason) -> {
            JsonObject o = holdEvent(hold, "revoke_requested");
            o.addProperty("requester", requester);
            o.addProperty("reason", reason);
            say(o);
          });
      JsonElement rh = cmd.get("revoke_holders");
      if (rh != null && !rh.isJsonNull() && rh.getAsBoolean()) {
        b.revokeHolders(true);
      }
      String kind = str(cmd, "kind", "exclusive");
      if (kind.equals("shared")) {
        b.kind(LockKind.SHARED);
      } else if (kind.equals("semaphore")) {
        b.kind(LockKind.SEMAPHORE).maxHolders((int) num(cmd, "max_holders", 0));
      } else {
        b.kind(LockKind.EXCLUSIVE);
      }
      JsonElement md = cmd.get("metadata");
      if (md != null && md.isJsonObject()) {
        for (Map.Entry<String, JsonElement> e : md.getAsJsonObject().entrySet()) {
          b.metadata(e.getKey(), e.getValue().getAsString());
        }
      }
      h = client.acquire(str(cmd, "lock", ""), b.build());
    } catch (RuntimeException e) {
      JsonObject o = holdEvent(hold, "error");
      o.addProperty("code", codeName(e));
      o.addProperty("message", String.valueOf(e.getMessage()));
      say(o);
      return;
    }
    holds.put(hold, h);
    JsonObject o = holdEvent(hold, "acquired");
    o.addProperty("token", h.fencingToken());
    o.addProperty("lease_id", h.leaseId());
    say(o);
    follow(hold, h);
  }

  /** Reports the hold's state changes until it ends. */
  void follow(String hold, Hold h) {
    HoldState last = HoldState.HELD;
    while (last == HoldState.HELD || last == HoldState.SUSPENDED) {
      HoldState now;
      try {
        now = h.awaitChange(last, Duration.ofMinutes(10));
      } catch (InterruptedException e) {
        return;
      }
      if (now == last) {
        continue;
      }
      switch (now) {
        case SUSPENDED -> say(holdEvent(hold, "suspended"));
        case HELD -> say(holdEvent(hold, "resumed"));
        case LOST -> {
          JsonObject o = holdEvent(hold, "lost");
          o.addProperty("reason", h.lostReason());
          o.addProperty("message", h.lostMessage());
          say(o);
        }
        case RELEASED -> say(holdEvent(hold, "released"));
        default -> { }
      }
      last = now;
    }
  }

  void release(JsonObject cmd) {
    String hold = str(cmd, "hold", "");
    Hold h = holds.get(hold);
    if (h == null) {
      JsonObject o = holdEvent(hold, "error");
      o.addProperty("code", "NOT_HELD");
      o.addProperty("message", "release of a hold this client does not have");
      say(o);
      return;
    }
    h.release();  // the follower reports RELEASED (or LOST)
  }

  void unary(JsonObject cmd) {
    String op = str(cmd, "cmd", "");
    JsonObject o = new JsonObject();
    o.add("req", cmd.get("req"));
    try {
      if (op.equals("describe")) {
        Optional<LockDescription> d = client.describe(str(cmd, "lock", ""));
        if (d.isEmpty()) {
          o.addProperty("error", "NOT_FOUND");
        } else {
          JsonArray holders = new JsonArray();
          JsonArray ids = new JsonArray();
          JsonArray waiters = new JsonArray();
          for (Contender c : d.get().holders()) {
            holders.add(c.owner());
            ids.add(c.identity());
          }
          for (Contender c : d.get().waiters()) {
            waiters.add(c.owner());
          }
          o.add("holders", holders);
          o.add("holder_identities", ids);
          o.add("waiters", waiters);
          o.addProperty("max_holders", d.get().maxHolders());
        }
      } else if (op.equals("list")) {
        JsonArray names = new JsonArray();
        for (String n : client.list(str(cmd, "prefix", "")).names()) {
          names.add(n);
        }
        o.add("names", names);
      } else if (op.equals("check")) {
        JsonElement stale = cmd.get("stale");
        TokenCheck r = client.checkToken(str(cmd, "lock", ""), Long.parseUnsignedLong(
            str(cmd, "token", "0")), stale != null && !stale.isJsonNull() && stale.getAsBoolean());
        o.addProperty("verdict", r.verdict().name());
        o.addProperty("highest_holder_token", Long.toUnsignedString(r.highestHolderToken()));
        o.addProperty("linearizable", r.linearizable());
      } else if (op.equals("revoke")) {
        if (client.revoke(str(cmd, "lease_id", ""), owner, str(cmd, "reason", ""))) {
          o.addProperty("ok", true);
        } else {
          o.addProperty("error", "NOT_FOUND");
        }
      }
    } catch (RuntimeException e) {
      o = new JsonObject();
      o.add("req", cmd.get("req"));
      o.addProperty("error", codeName(e));
      o.addProperty("message", String.valueOf(e.getMessage()));
    }
    say(o);
  }

  public static void main(String[] args) throws Exception {
    String server = null;
    String owner = "";
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("--server") && i + 1 < args.length) {
        server = args[++i];
      } else if (args[i].equals("--owner") && i + 1 < args.length) {
        owner = args[++i];
      } else {
        System.err.println("usage: Runner --server TARGET [--owner NAME]");
        System.exit(2);
      }
    }
    if (server == null) {
      System.err.println("usage: Runner --server TARGET [--owner NAME]");
      System.exit(2);
    }
    TurnstileClient client = TurnstileClient.connect(server);
    Runner runner = new Runner(client, owner);
    ExecutorService pool = Executors.newCachedThreadPool(r -> {
      Thread t = new Thread(r);
      t.setDaemon(true);
      return t;
    });
    JsonObject ready = new JsonObject();
    ready.addProperty("event", "ready");
    ready.addProperty("lang", "java");
    say(ready);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      line = line.strip();
      if (line.isEmpty()) {
        continue;
      }
      JsonObject cmd = JsonParser.parseString(line).getAsJsonObject();
      String op = str(cmd, "cmd", "");
      if (op.equals("quit")) {
        break;
      }
      switch (op) {
        case "acquire" -> pool.execute(() -> runner.acquire(cmd));
        case "release" -> pool.execute(() -> runner.release(cmd));
        case "describe", "list", "revoke", "check" -> pool.execute(() -> runner.unary(cmd));
        default -> {
          JsonObject o = new JsonObject();
          o.addProperty("event", "error");
          o.addProperty("code", "UNKNOWN_COMMAND");
          o.addProperty("message", line);
          say(o);
        }
      }
    }
    List<Hold> all = new ArrayList<>(runner.holds.values());
    for (Hold h : all) {
      h.release(Duration.ofSeconds(2));
    }
    OUT.flush();
    client.close();
    System.exit(0);
  }
}
