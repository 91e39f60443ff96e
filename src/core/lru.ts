/**
 * A map that keeps its entries in least-recently-used order, with every operation O(1): a Map for
 * lookup and a doubly linked list through the entries for the order.
 *
 * Why not a plain Map in insertion order, deleting `keys().next()` (or the first entries of a
 * `for...of`) to evict: V8 leaves a hole in a Map's table for every deleted entry until the table
 * is rebuilt, and iteration starts at the first slot, so each eviction walks every hole that the
 * evictions and moves before it left. A full map pays that on every insert: 11 µs an eviction at
 * 10,000 entries and 60 µs at 100,000 measured here, growing with the size; a full 256 MB response
 * cache spent over 150 µs a store. This list is never walked; the Map is only looked up.
 */
export class Lru<K, V> {
  readonly #nodes = new Map<K, Node<K, V>>();
  /** Sentinel of the circular list: `next` is the most recently used entry, `prev` the least. */
  readonly #head: Node<K, V>;

  constructor() {
    const head = { key: undefined, value: undefined, prev: undefined, next: undefined } as unknown as Node<K, V>;
    head.prev = head;
    head.next = head;
    this.#head = head;
  }

  get size(): number {
    return this.#nodes.size;
  }

  has(key: K): boolean {
    return this.#nodes.has(key);
  }

  /** The value, made the most recently used. */
  get(key: K): V | undefined {
    const node = this.#nodes.get(key);
    if (node === undefined) return undefined;
    if (this.#head.next !== node) {
      unlink(node);
      this.#linkFirst(node);
    }
    return node.value;
  }

  /** The value, leaving the order as it is. */
  peek(key: K): V | undefined {
    return this.#nodes.get(key)?.value;
  }

  /** Sets the value and makes it the most recently used. */
  set(key: K, value: V): void {
    const node = this.#nodes.get(key);
    if (node !== undefined) {
      node.value = value;
      if (this.#head.next !== node) {
        unlink(node);
        this.#linkFirst(node);
      }
      return;
    }
    const added: Node<K, V> = { key, value, prev: this.#head, next: this.#head };
    this.#nodes.set(key, added);
    this.#linkFirst(added);
  }

  /** Removes the entry; its value, or undefined when there was none. */
  delete(key: K): V | undefined {
    const node = this.#nodes.get(key);
    if (node === undefined) return undefined;
    this.#nodes.delete(key);
    unlink(node);
    return node.value;
  }

  /** Removes and returns the least recently used entry; undefined when empty. */
  shift(): [K, V] | undefined {
    const node = this.#head.prev;
    if (node === this.#head) return undefined;
    this.#nodes.delete(node.key);
    unlink(node);
    return [node.key, node.value];
  }

  clear(): void {
    this.#nodes.clear();
    this.#head.prev = this.#head;
    this.#head.next = this.#head;
  }

  /** Keys from the least to the most recently used (for tests and listings; O(n)). */
  *keys(): IterableIterator<K> {
    for (let n = this.#head.prev; n !== this.#head; n = n.prev) yield n.key;
  }

  #linkFirst(node: Node<K, V>): void {
    const first = this.#head.next;
    node.prev = this.#head;
    node.next = first;
    first.prev = node;
    this.#head.next = node;
  }
}

interface Node<K, V> {
  key: K;
  value: V;
  prev: Node<K, V>;
  next: Node<K, V>;
}

function unlink<K, V>(node: Node<K, V>): void {
  node.prev.next = node.next;
  node.next.prev = node.prev;
  node.prev = node;
  node.next = node;
}
