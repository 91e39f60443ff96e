/** Bench child: the built-in fake provider, alone in its process (the upstream of every target). */
import { startFakeProvider } from "../src/demo/fake-provider.js";
import { serveParent } from "./proc.js";

const fake = await startFakeProvider(0, "127.0.0.1");
serveParent({}, () => fake.close()).ready({ url: fake.url });
