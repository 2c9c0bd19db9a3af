# fiber_chain in MRI Ruby: the peer of `neverblock bench fiber-chain --peers`.
#
# Each fiber creates the next and transfers to it; the last transfers back to the
# root (Ruby 3 forbids Fiber.yield from a transferred fiber), so every fiber stays
# alive. Timed: from creating the first fiber to the root receiving t + 1.
# Usage: ruby fiber_chain.rb --t 10000 --warmup 20 --runs 20   (prints one JSON line)
require "json"

opts = { "t" => 10_000, "warmup" => 20, "runs" => 20 }
ARGV.each_slice(2) { |flag, value| opts[flag.delete_prefix("--")] = Integer(value) }
t = opts["t"]

def test_fiber_1(t, root)
  Fiber.new do |x|
    if x > t
      root.transfer(x)
    else
      f = test_fiber_1(t, root)
      f.transfer(x + 1)
    end
  end
end

def run_once(t)
  root = Fiber.current
  start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  result = test_fiber_1(t, root).transfer(0)
  elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start
  raise "chain returned #{result}, expected #{t + 1}" unless result == t + 1
  elapsed
end

opts["warmup"].times { run_once(t) }
times = Array.new(opts["runs"]) { run_once(t) }
mean = times.sum / times.size
stddev = Math.sqrt(times.sum { |x| (x - mean)**2 } / [times.size - 1, 1].max)
puts JSON.generate(bench: "fiber-chain", impl: "ruby", params: opts,
                   metrics: { mean_s: mean, stddev_s: stddev, min_s: times.min })
