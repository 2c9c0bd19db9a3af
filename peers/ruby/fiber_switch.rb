# fiber_switch in MRI Ruby: the peer of `neverblock bench fiber-switch --peers`.
#
# t fibers each loop `Fiber.yield(random fiber)`; the driver does
# `nxt = nxt.resume` n*t times. One untimed warm-up pass, then one timed pass.
# Usage: ruby fiber_switch.rb --t 100 --n 1000   (prints one JSON line)
require "json"

opts = { "t" => 100, "n" => 1000 }
ARGV.each_slice(2) { |flag, value| opts[flag.delete_prefix("--")] = Integer(value) }
t = opts["t"]
rounds = opts["n"] * t

fibers = Array.new(t) { Fiber.new { loop { Fiber.yield(fibers[rand(t)]) } } }
drive = lambda do
  nxt = fibers[0]
  rounds.times { nxt = nxt.resume }
end

drive.call
start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
drive.call
total = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start
puts JSON.generate(bench: "fiber-switch", impl: "ruby", params: opts,
                   metrics: { total_s: total, round_trip_ns: total * 1e9 / rounds })
