// The Java take-home consumer: built outside the repository against the
// installed jar and Debian's jars (tests/take_home/java.sh), it takes the
// lock "take-home/java", prints its fencing token and releases it.
import io.turnstile.client.AcquireOptions;
import io.turnstile.client.Hold;
import io.turnstile.client.TurnstileClient;
import java.time.Duration;

public class Consumer {
  public static void main(String[] args) {
    try (TurnstileClient client = TurnstileClient.connect("127.0.0.1:7400");
         Hold hold = client.acquire("take-home/java",
             AcquireOptions.builder().waitTimeout(Duration.ofSeconds(20)).build())) {
      System.out.println("fencing_token=" + hold.fencingToken());
      if (!hold.release()) {
        throw new IllegalStateException("the hold was gone before its release");
      }
    }
  }
}
