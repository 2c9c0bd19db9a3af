# delay_client in MRI Ruby: the threads peer of the delay-client benchmark.
#
# The backend answers each request after D ms. One Thread per request, each
# opening its own connection with Net::HTTP.start (no keep-alive), all started
# at once; timed from just before the first thread starts to the last join.
# A request that raises, or answers with a status other than 200, is counted in
# errors and the run goes on; the first such error is printed to stderr. So is a
# thread that cannot be created (ThreadError), which counts as an error too.
# Usage: ruby delay_client.rb URL [N]   (N defaults to 1000; prints one JSON line)
require "json"
require "net/http"
require "uri"

abort "usage: ruby delay_client.rb URL [N]" unless (1..2).cover?(ARGV.size)
uri = URI(ARGV[0])
n = Integer(ARGV.fetch(1, "1000"))
abort "N must be positive" unless n.positive?
path = uri.request_uri

lock = Mutex.new
ok = 0
errors = 0
first_error = nil
fail = lambda do |e|
  lock.synchronize do
    errors += 1
    first_error ||= e
  end
end

start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
threads = Array.new(n) do
  Thread.new do
    # nil proxy: talk to the backend directly even when http_proxy is set.
    response = Net::HTTP.start(uri.host, uri.port, nil) { |http| http.get(path) }
    if response.code == "200"
      lock.synchronize { ok += 1 }
    else
      fail.call(RuntimeError.new("status #{response.code} #{response.message}"))
    end
  rescue StandardError => e
    fail.call(e)
  end
rescue ThreadError => e
  fail.call(e)
  nil
end
threads.each { |t| t&.join }
seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start

warn "first error: #{first_error.class}: #{first_error.message}" if first_error
puts JSON.generate(requests: n, ok: ok, errors: errors, seconds: seconds)
